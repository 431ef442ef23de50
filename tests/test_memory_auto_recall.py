"""Automatic recall and the recollection lists, over the index (daemon/memory/auto_recall.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from daemon.memory.api import MemoryView
from daemon.memory.system import MemorySystem
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.tokens import count_tokens
from tests.memory_support import add_session, memory_system, settings

pytestmark = pytest.mark.anyio


async def seed(memory: MemorySystem) -> None:
    await memory.remember("My sister Ada lives in Lisbon and studies octopuses")
    await memory.remember("I am allergic to peanuts", target="profile")
    await memory.remember("Prefers short answers in the morning", target="profile")
    await memory.remember("The boiler service is booked for next Tuesday")
    await add_session(
        memory.db,
        "s1",
        [
            ("user", "Ada sent photos of the octopus lab in Lisbon."),
            ("assistant", "Lovely! The lab looks huge."),
            ("user", "Let's talk about the boiler later."),
        ],
    )
    await memory.index_session("s1")
    await memory.index.flush()


async def test_recollection_lists_are_newest_first_and_skip_retired(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await seed(memory)
        assert isinstance(memory.view, MemoryView)
        profile = await memory.view.profile_facts(5)
        assert [i.text for i in profile] == [
            "Prefers short answers in the morning",
            "I am allergic to peanuts",
        ]
        facts = await memory.view.recent_facts(5)
        assert all(i.kind == "fact" for i in facts) and len(facts) == 2
        await memory.retract(facts[0].id, reason="done", origin="person")
        assert [i.id for i in await memory.view.recent_facts(5)] == [facts[1].id]
        entries = await memory.view.recent_entries(10)
        assert entries and all(i.kind != "chunk" for i in entries)
        assert await memory.view.recent_summaries(3) == []
        assert await memory.view.profile_facts(0) == []


async def test_auto_recall_finds_relevant_memories_with_explicit_facts_first(
    tmp_path: Path,
) -> None:
    async with memory_system(tmp_path) as memory:
        await seed(memory)
        with anyio.fail_after(5):
            items = await memory.view.auto_recall("How is Ada doing in Lisbon?", limit=6)
        assert 1 <= len(items) <= 6
        assert items[0].id == "fact:1"  # the explicit fact about Ada comes first
        assert any(i.kind == "chunk" and "octopus lab" in i.text for i in items)
        assert len({i.id for i in items}) == len(items)
        assert len({" ".join(i.text.split()) for i in items}) == len(items)
        excluded = await memory.view.auto_recall(
            "How is Ada doing in Lisbon?", exclude_ids=frozenset({"fact:1"})
        )
        assert "fact:1" not in {i.id for i in excluded} and excluded


async def test_auto_recall_stays_quiet_for_unrelated_messages(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await seed(memory)
        assert await memory.view.auto_recall("make me a sandwich") == []
        assert await memory.view.auto_recall("   ") == []


async def test_auto_recall_respects_limit_and_token_budget(tmp_path: Path) -> None:
    config = settings(memory=MemorySettings(auto_recall_tokens=60, auto_recall_max=6))
    async with memory_system(tmp_path, config=config) as memory:
        for i in range(10):
            await memory.remember(f"Lisbon note {i}: " + "trams and tiles and pastries " * (i + 1))
        await memory.index.flush()
        items = await memory.view.auto_recall("Lisbon trams", limit=6)
        assert items and sum(count_tokens(i.text) for i in items) <= 60
        few = await memory.view.auto_recall("Lisbon trams", limit=2)
        assert len(few) <= 2


async def test_auto_recall_follow_up_leans_on_the_previous_reply(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await seed(memory)
        bare = await memory.view.auto_recall("and what about the boiler?")
        follow = await memory.view.auto_recall(
            "when is it?", previous_reply="The boiler service needs booking before winter."
        )
        assert any("boiler" in i.text for i in bare)
        assert any("boiler" in i.text.lower() for i in follow)


async def test_auto_recall_can_be_switched_off(tmp_path: Path) -> None:
    config = settings(memory=MemorySettings(auto_recall=False))
    async with memory_system(tmp_path, config=config) as memory:
        await seed(memory)
        assert await memory.view.auto_recall("How is Ada doing in Lisbon?") == []


async def test_open_view_reads_a_home_without_models(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await seed(memory)
    # The view reads on the real clock, months after the seed's fake one: not stale by age.
    config = settings(memory=MemorySettings(embedder="none", stale_after_days=3650))
    async with MemorySystem.open_view(Home(tmp_path), config) as view:
        assert [i.text for i in await view.profile_facts(1)] == [
            "Prefers short answers in the morning"
        ]
        assert (await view.auto_recall("Ada in Lisbon"))[0].id == "fact:1"


async def test_auto_recall_shows_each_message_line_once_across_chunks_and_windows(
    tmp_path: Path,
) -> None:
    # A message is its own chunk and sits in two overlapping windows: before, the line about
    # Mo appeared three times in one turn's recall and was paid for three times.
    async with memory_system(tmp_path) as memory:
        await add_session(
            memory.db,
            "s1",
            [
                ("user", "Good morning."),
                ("assistant", "Morning! What's on today?"),
                ("user", "Remember that my partner Mo is allergic to shellfish."),
                ("assistant", "Noted: Mo and shellfish do not mix."),
                ("user", "We are cooking paella for Mo's birthday on Friday."),
                ("assistant", "Then a paella without prawns or mussels."),
            ],
        )
        await memory.index_session("s1")
        await memory.index.flush()
        with anyio.fail_after(5):
            items = await memory.view.auto_recall("What is Mo allergic to?", limit=6)
        lines = [line for i in items if i.kind == "chunk" for line in i.text.splitlines()]
        assert any("allergic to shellfish" in line for line in lines)
        assert len(lines) == len(set(lines)), lines
        assert sum("allergic to shellfish" in line for line in lines) == 1
