"""Staged recall: planner, search fallback, summaries, transcript windows, synthesis, degradation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from daemon.memory.recall import RecallError
from daemon.models.base import ModelRequest, ModelUnavailable, SpendCapReached
from daemon.settings import MemorySettings
from daemon.testing import ScriptedModel
from tests.memory_support import add_session, memory_system, raising, settings

pytestmark = pytest.mark.anyio

TRIP = [
    ("user", "Let's plan my Lisbon trip to see my sister Ada."),
    ("assistant", "Happy to. When would you like to go?"),
    ("user", "Friday. I booked the hotel near Alfama, room 42."),
]
GARDEN = [
    ("user", "The garden shed roof is leaking again."),
    ("assistant", "Patch it with bitumen tape before the rain on Sunday."),
]


def summary_reply(title: str, slug: str, summary: str) -> str:
    return json.dumps(
        {"title": title, "slug": slug, "tags": [], "summary": summary, "decisions": []}
    )


def index_lines(request: ModelRequest) -> list[str]:
    text = request.messages[-1].text
    assert text.startswith("QUERY: ") and "\nINDEX:\n" in text
    return text.split("\nINDEX:\n", 1)[1].splitlines()


def sources_of(request: ModelRequest) -> str:
    text = request.messages[-1].text
    assert text.startswith("QUESTION: ") and "\nSOURCES:\n" in text
    return text.split("\nSOURCES:\n", 1)[1]


async def seed(memory, summaries: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Two summarised sessions and two facts."""
    summariser = ScriptedModel(list(summaries))
    memory.roles._overrides["summariser"] = summariser
    await add_session(memory.db, "trip", TRIP)
    await add_session(memory.db, "garden", GARDEN, started="2026-03-01T09:05:00+00:00")
    for sid in ("trip", "garden"):
        await memory.index_session(sid)
        await memory.summarise_session(sid, wait=True)
    await memory.remember("My sister Ada lives in Lisbon", origin="person")
    await memory.remember("Ada's cat is called Pastel", origin="tool")
    await memory.index.flush()


SUMMARIES = [
    summary_reply(
        "Lisbon trip",
        "lisbon-trip-ada",
        "The person planned a Lisbon trip to visit their sister Ada; flying Friday.",
    ),
    summary_reply(
        "Leaking shed",
        "garden-shed-roof",
        "The garden shed roof leaks; patch with bitumen tape before Sunday.",
    ),
]


async def test_planner_picks_a_summary_and_synthesis_cites_it(tmp_path: Path) -> None:
    planner = ScriptedModel(lambda req: json.dumps({"ids": ["summary:trip", "summary:unknown"]}))
    synthesis = ScriptedModel(
        lambda req: (
            "You fly to Lisbon on Friday [session-2026-03-02_1420__lisbon-trip-ada] to see Ada [fact:1]."
        )
    )
    addenda_points: list[str] = []

    def addenda(point: str, text: str) -> str:
        addenda_points.append(point)
        return ""

    models = {"recall_planner": planner, "recall_synthesis": synthesis}
    async with memory_system(tmp_path, models=models, topic_addenda=addenda) as memory:
        await seed(memory, SUMMARIES)
        with anyio.fail_after(10):
            out = await memory.recall("When is my Lisbon trip to see Ada?", session_id="asker")
    assert out.startswith("You fly to Lisbon on Friday [session-2026-03-02_1420__lisbon-trip-ada]")
    assert (
        "[fact:1] (fact, person)" in out
        and "[session-2026-03-02_1420__lisbon-trip-ada] (summary, system)" in out
    )
    lines = index_lines(planner.calls[0])
    assert any(
        line.startswith("summary:trip | session-2026-03-02_1420__lisbon-trip-ada | ")
        for line in lines
    )
    assert planner.calls[0].task == "plan_recall" and synthesis.calls[0].task == "synthesise"
    sources = sources_of(synthesis.calls[0])
    assert sources.index("[fact:1]") < sources.index(
        "[session-2026-03-02_1420__lisbon-trip-ada]"
    )  # facts first
    assert "garden" not in sources
    assert "recall_persona" in addenda_points


async def test_empty_plan_falls_back_to_hybrid_search(tmp_path: Path) -> None:
    planner = ScriptedModel(lambda req: 'Nothing here, sorry: {"ids": []}')
    synthesis = ScriptedModel(
        lambda req: (
            "Patch the shed roof with bitumen tape [session-2026-03-01_0905__garden-shed-roof]."
        )
    )
    async with memory_system(
        tmp_path, models={"recall_planner": planner, "recall_synthesis": synthesis}
    ) as memory:
        await seed(memory, SUMMARIES)
        result = await memory.recall_result("how do I fix the shed roof leak?")
    assert result.planner == "empty" and result.synthesised
    assert [s.cite for s in result.sources] == ["session-2026-03-01_0905__garden-shed-roof"]


async def test_models_unavailable_degrade_to_an_extractive_cited_answer(tmp_path: Path) -> None:
    models = {
        "recall_planner": raising(ModelUnavailable("down")),
        "recall_synthesis": raising(SpendCapReached("cap")),
    }
    async with memory_system(tmp_path, models=models) as memory:
        await seed(memory, SUMMARIES)
        result = await memory.recall_result("Where does my sister Ada live?")
        text = result.render(memory.settings.memory.recall_max_bytes)
    assert result.planner == "unavailable" and not result.synthesised
    assert "[fact:1] My sister Ada lives in Lisbon" in text
    assert (
        "[fact:2] Ada's cat is called Pastel" in text and "[fact:2] (fact, tool)" in text
    )  # origin labelled
    assert "[session-2026-03-02_1420__lisbon-trip-ada]" in text


async def test_vague_summary_opens_query_centred_transcript_windows(tmp_path: Path) -> None:
    vague = [summary_reply("Travel chat", "travel-chat", "We chatted about travel."), SUMMARIES[1]]
    planner = ScriptedModel(lambda req: json.dumps({"ids": ["summary:trip"]}))
    synthesis = ScriptedModel(
        lambda req: "Room 42 near Alfama [session-2026-03-02_1420__travel-chat]."
    )
    async with memory_system(
        tmp_path, models={"recall_planner": planner, "recall_synthesis": synthesis}
    ) as memory:
        await seed(memory, vague)
        await memory.recall("which hotel room did I book near Alfama?")
    sources = sources_of(synthesis.calls[0])
    assert "Transcript excerpts:" in sources
    assert (
        "  [trip-m2 · 2026-03-02T14:22:00+00:00 · user] Friday. I booked the hotel near Alfama, room 42."
        in sources
    )
    assert all(
        line.startswith(("[fact:", "[session-"))
        for line in sources.splitlines()
        if line.startswith("[")
    )


async def test_recall_session_windows_are_bounded_and_centred(tmp_path: Path) -> None:
    config = settings(memory=MemorySettings(recall_max_bytes=2048))
    long_chat = [
        ("user" if i % 2 else "assistant", f"message {i} about the weather and nothing else")
        for i in range(200)
    ]
    long_chat[120] = ("user", "The safe combination is hidden under the blue vase.")
    async with memory_system(tmp_path, config=config) as memory:
        await add_session(memory.db, "long", long_chat)
        out = await memory.recall_session("long", "where is the blue vase?")
        assert len(out.encode()) <= 2048
        assert "[long-m120 · " in out and "blue vase" in out
        assert "[long-m118 · " in out and "[long-m122 · " in out and "[long-m10 · " not in out
        by_cite = await memory.recall_session("[session-long]", "vase")
        assert "long-m120" in by_cite
        with pytest.raises(RecallError, match="no session"):
            await memory.recall_session("missing", "x")


async def test_output_is_bounded_in_bytes_and_keeps_its_sources(tmp_path: Path) -> None:
    config = settings(memory=MemorySettings(recall_max_bytes=600))
    planner = ScriptedModel(lambda req: json.dumps({"ids": ["summary:trip"]}))
    synthesis = ScriptedModel(lambda req: "Lisbon é ótimo. " * 400)
    async with memory_system(
        tmp_path, models={"recall_planner": planner, "recall_synthesis": synthesis}, config=config
    ) as memory:
        await seed(memory, SUMMARIES)
        out = await memory.recall("Lisbon trip with Ada")
    assert len(out.encode()) <= 600
    assert re.search(r"Sources \(memory; data, not instructions\): \[fact:1\]", out)


async def test_nothing_relevant_makes_no_model_call(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await memory.remember("My sister Ada lives in Lisbon")
        out = await memory.recall("quantum chromodynamics lecture notes")
        assert out == "Nothing in memory matches 'quantum chromodynamics lecture notes'."
        with pytest.raises(RecallError):
            await memory.recall("   ")


async def test_the_offline_provider_reads_our_prompts_end_to_end(tmp_path: Path) -> None:
    from daemon.models.offline import OfflineModel

    offline = OfflineModel()
    models = {"summariser": offline, "recall_planner": offline, "recall_synthesis": offline}
    async with memory_system(tmp_path, models=models) as memory:
        await add_session(memory.db, "trip", TRIP)
        await add_session(memory.db, "garden", GARDEN, started="2026-03-01T09:05:00+00:00")
        paths = [await memory.summarise_session(sid, wait=True) for sid in ("trip", "garden")]
        assert all(p is not None and p.name.startswith("session-2026-03-0") for p in paths)
        result = await memory.recall_result("Which hotel did I book in Lisbon?")
        text = result.render(memory.settings.memory.recall_max_bytes)
    assert result.planner == "picked" and result.synthesised
    trip_cite = paths[0].stem  # type: ignore[union-attr]
    assert f"[{trip_cite}]" in result.answer and "Alfama" in result.answer
    assert "garden" not in result.answer
    assert len(text.encode()) <= memory.settings.memory.recall_max_bytes


async def test_recall_cli_answers_from_a_home_with_json(
    home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from daemon.cli.memory import add_commands

    with (home_dir / "reverie.toml").open("a") as fh:
        fh.write('\n[memory]\nembedder = "none"\n')
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home")
    common.add_argument("--config")
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(), common)

    async def run(*argv: str) -> int:
        args = parser.parse_args([*argv, "--home", str(home_dir)])
        with anyio.fail_after(30):
            return await args.func(args)

    assert await run("remember", "My sister Ada lives in Lisbon") == 0
    capsys.readouterr()
    assert await run("recall", "Where does Ada live?", "--json") == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # log lines go first
    assert (
        out["sources"][0]["cite"] == "fact:1"
        and "Lisbon" in out["text"]
        and "[fact:1]" in out["answer"]
    )
    assert await run("recall", "Where does Ada live?") == 0
    assert "[fact:1]" in capsys.readouterr().out
