"""Multi-hop and inference search through the real index, the recall fallback, and scores."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bench.memory_dataset import generate_dialogue
from daemon.cli import main
from daemon.memory.query import decompose
from daemon.memory.system import MemorySystem
from daemon.testing import ScriptedModel
from tests.memory_support import NOW, add_session, memory_system


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


BROTHER = [("user", "My brother Tomas just got into medical school, we're all so proud!")]
LATER = [
    ("user", "The weather was grey all week, I stayed in and read."),
    ("assistant", "Sounds restful. Anything good?"),
    ("user", "Tomas already complains about the anatomy exams, he studies every single night."),
    ("assistant", "Poor him, the first year is hard."),
    ("user", "I repainted the kitchen on Sunday, pale green this time."),
    ("assistant", "Nice colour for a kitchen."),
    ("user", "Then we walked the dog along the canal until it got dark."),
    ("assistant", "A good way to end a week."),
    ("user", "Tomorrow I have to call the plumber about the boiler."),
    ("assistant", "Good luck with that."),
]
NOISE = [
    ("user", f"My neighbour {name} drives the school bus and never says hello.")
    for name in ("Aldo", "Bram", "Cyril", "Dario", "Emil", "Fabio", "Gianni", "Hugo", "Ivo")
]


async def _hop_history(memory: MemorySystem) -> None:
    await add_session(memory.db, "early", BROTHER, started="2026-01-05T09:00:00+00:00")
    await add_session(memory.db, "noise", NOISE, started="2026-01-20T09:00:00+00:00")
    await add_session(memory.db, "later", LATER, started="2026-02-10T09:00:00+00:00")
    for sid in ("early", "noise", "later"):
        await memory.index_session(sid)
    await memory.index.flush()


@pytest.mark.anyio
async def test_recall_fallback_keeps_what_the_second_hop_found_through_a_name(
    tmp_path: Path,
) -> None:
    """No summary to plan over: recall searches, and the answer shares only "Tomas" with its
    first hop; it reaches the synthesiser, centred on the message that was found."""
    synthesis = ScriptedModel(lambda req: "He finds the anatomy exams hard [session-later].")
    async with memory_system(tmp_path, models={"recall_synthesis": synthesis}) as memory:
        await _hop_history(memory)
        with anyio.fail_after(20):
            result = await memory.recall_result("How is my brother getting on at medical school?")
    assert result.planner == "skipped" and result.synthesised
    assert "later" in {s.session_id for s in result.sources}
    [prompt] = [c.messages[-1].text for c in synthesis.calls]
    assert "Tomas already complains about the anatomy exams" in prompt
    assert "Tomas just got into medical school" in prompt


@pytest.mark.anyio
async def test_second_hop_results_say_which_name_led_to_them(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await _hop_history(memory)
        plan = decompose("How is my brother getting on at medical school?", now=NOW)
        with anyio.fail_after(10):
            found = await memory.index.search_plan(plan, k=8)
    via = [(i.text, i.meta.get("via")) for i in found]
    assert any("anatomy exams" in t and v == "Tomas" for t, v in via)
    # A bridge is a name the first hop's best hits mention; what it found names it too.
    assert all(str(v) in t for t, v in via if v)
    assert any(v is None for t, v in via)
