"""Multi-hop and inference search through the real index, the recall fallback, and scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.memory_dataset import generate_dialogue
from daemon.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_memory_search_json_scores_never_rise_down_the_list(
    tmp_path: Path,
    home_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second hop and the facet re-rank reorder results; the emitted scores follow the order."""
    monkeypatch.setenv("REVERIE_EMBEDDER", "hash")
    data = generate_dialogue(3)
    conv, questions = data.write(tmp_path / "set")
    code, _ = _run(capsys, "memory", "import", str(conv), "--home", str(home_dir), "--json")
    assert code == 0
    batch = tmp_path / "q.txt"
    batch.write_text(
        "".join(json.loads(q)["question"] + "\n" for q in questions.read_text().splitlines())
    )
    for mode in ("hybrid", "lexical"):
        code, out = _run(
            capsys,
            "memory",
            "search",
            "--batch",
            str(batch),
            "--json",
            "--k",
            "10",
            "--mode",
            mode,
            "--home",
            str(home_dir),
        )
        assert code == 0
        rows = [json.loads(line) for line in out.splitlines()]
        assert len(rows) == len(data.questions)
        for results in rows:
            assert len(results) == 10
            scores = [r["score"] for r in results]
            assert scores == sorted(scores, reverse=True), scores
            assert scores[-1] > 0
