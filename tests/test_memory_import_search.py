"""`reverie memory import | search | reindex | stats` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.cli import main
from tests.memory_support import DIALOGUE_LINES, write_jsonl

LINES = DIALOGUE_LINES


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVERIE_EMBEDDER", "hash")


_write = write_jsonl


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _import_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path, home: Path) -> None:
    """Import LINES into `home` through the CLI."""
    src = str(_write(tmp_path / "c.jsonl", LINES))
    assert _run(capsys, "memory", "import", src, "--home", str(home))[0] == 0


def test_import_is_idempotent_and_search_json_traces_to_messages(
    tmp_path: Path, home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _write(tmp_path / "conv.jsonl", LINES)
    code, out, _ = _run(capsys, "memory", "import", str(src), "--home", str(home_dir), "--json")
    assert code == 0
    counts = json.loads(out)
    assert counts["sessions"] == 2 and counts["messages"] == 4 and counts["already_present"] == 0
    assert counts["chunks"] >= 4 and counts["embeddings"] == "hash-256"
    assert (home_dir / "sessions" / "imported" / "conv-1.jsonl").read_text().count("\n") == 3

    code, out, _ = _run(capsys, "memory", "import", str(src), "--home", str(home_dir), "--json")
    again = json.loads(out)
    assert (
        code == 0
        and again["messages"] == 0
        and again["already_present"] == 4
        and again["chunks"] == 0
    )
    assert (home_dir / "sessions" / "imported" / "conv-1.jsonl").read_text().count("\n") == 3

    code, out, _ = _run(
        capsys,
        "memory",
        "search",
        "When did Caroline go to the support group?",
        "--json",
        "--k",
        "3",
        "--home",
        str(home_dir),
    )
    assert code == 0
    items = json.loads(out)
    assert 0 < len(items) <= 3
    for item in items:
        assert {"kind", "id", "score", "text", "session", "message_ids", "ts"} <= item.keys()
    assert "D1:1" in items[0]["message_ids"] and items[0]["session"] == "conv-1"
    # The message shows once (alone, or opening its window), labelled and timed as said.
    exact = items[0]
    assert exact["message_ids"][0] == "D1:1"
    assert exact["text"].startswith("Caroline (8 May 2023): I went to the LGBTQ support group")
    assert exact["ts"].startswith("2023-05-08T13:56")

    code, out, _ = _run(
        capsys,
        "memory",
        "search",
        "painting sunrise lake",
        "--mode",
        "lexical",
        "--json",
        "--home",
        str(home_dir),
    )
    assert code == 0 and json.loads(out)[0]["message_ids"] == ["D2:1"]


def test_batch_search_prints_one_array_per_line_in_order(
    tmp_path: Path, home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import_lines(capsys, tmp_path, home_dir)
    queries = tmp_path / "q.txt"
    queries.write_text("what did Melanie paint?\n\ncareer in counseling\n")
    code, out, _ = _run(
        capsys,
        "memory",
        "search",
        "--batch",
        str(queries),
        "--json",
        "--k",
        "2",
        "--home",
        str(home_dir),
    )
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 3
    assert rows[0][0]["message_ids"] == ["D2:1"]
    assert rows[1] == []
    assert "D1:3" in rows[2][0]["message_ids"]


def test_bad_import_file_is_one_line_error_and_writes_nothing(
    tmp_path: Path, home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps(LINES[0]) + "\n{not json\n")
    code, out, err = _run(capsys, "memory", "import", str(src), "--home", str(home_dir))
    assert code == 1 and out == ""
    assert (
        err.startswith("reverie: import stopped, nothing written: bad.jsonl line 2")
        and err.count("\n") == 1
    )
    assert list((home_dir / "sessions" / "imported").iterdir()) == []
    bad_role = _write(tmp_path / "role.jsonl", [{**LINES[0], "role": "system"}])
    code, _, err = _run(capsys, "memory", "import", str(bad_role), "--home", str(home_dir))
    assert code == 1 and "'role' must be" in err
    code, _, err = _run(
        capsys, "memory", "import", str(tmp_path / "missing.jsonl"), "--home", str(home_dir)
    )
    assert code == 1 and "no such file" in err
    code, _, err = _run(capsys, "memory", "search", "--home", str(home_dir))
    assert code == 1 and "QUERY or --batch" in err


def test_reindex_rebuilds_from_files_and_stats_reports(
    tmp_path: Path, home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import_lines(capsys, tmp_path, home_dir)
    for suffix in ("", "-wal", "-shm"):
        Path(str(home_dir / "reverie.db") + suffix).unlink(missing_ok=True)
    code, out, _ = _run(
        capsys, "memory", "search", "support group", "--json", "--home", str(home_dir)
    )
    assert code == 0 and json.loads(out) == []
    code, out, err = _run(capsys, "memory", "reindex", "--home", str(home_dir))
    assert code == 0, err
    assert out.startswith("reindexed")
    code, out, _ = _run(
        capsys, "memory", "search", "support group", "--json", "--home", str(home_dir)
    )
    assert json.loads(out)[0]["message_ids"] == ["D1:1"]
    code, out, _ = _run(capsys, "memory", "stats", "--json", "--home", str(home_dir))
    stats = json.loads(out)
    assert code == 0 and stats["by_kind"]["chunk"] >= 4 and stats["pending_vectors"] == 0
