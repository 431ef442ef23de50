"""The `MemoryView` contract, run against both implementations over the same memories.

The context assembler reads memory only through `MemoryView`; tests and benchmarks serve it
from a list (`ListMemoryView`), the daemon from the index (`IndexMemoryView`, automatic
recall). What the protocol promises must hold for both, or a test passing over the list
says nothing about the daemon.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.context.testing import ListMemoryView
from daemon.memory.api import LiveHistory, MemoryItem, MemoryView
from daemon.memory.rows import NewMemory
from tests.memory_support import memory_system

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def item(uid: str, kind: str, text: str, day: int, **extra: object) -> MemoryItem:
    return MemoryItem(
        id=uid, kind=kind, text=text, origin="person", ts=T0 + timedelta(days=day), **extra
    )  # type: ignore[arg-type]


MEMORIES = [
    item("fact:1", "fact", "My sister Ada lives in Lisbon and studies octopuses", 1),
    item("profile:1", "profile", "Allergic to peanuts", 2),
    item("fact:2", "fact", "The boiler service is booked for next Tuesday", 3),
    item("profile:2", "profile", "Prefers short answers in the morning", 4),
    item(
        "summary:s1",
        "summary",
        "Talked about the octopus lab photos and the boiler",
        5,
        session="s1",
    ),
    item(
        "chunk:s1:1",
        "chunk",
        "user: Ada sent photos of the octopus lab in Lisbon.",
        6,
        session="s1",
        message_ids=("m1",),
    ),
    item(
        "chunk:s1:2",
        "chunk",
        "assistant: The lab looks huge.",
        6,
        session="s1",
        message_ids=("m2",),
    ),
]


@asynccontextmanager
async def index_view(root: Path) -> AsyncIterator[MemoryView]:
    async with memory_system(root) as memory:
        await memory.index.upsert(
            [
                NewMemory(
                    uid=m.id,
                    kind=m.kind,
                    text=m.text,
                    origin=m.origin,
                    created_at=m.ts or T0,
                    session_id=m.session,
                    message_ids=m.message_ids,
                )
                for m in MEMORIES
            ]
        )
        await memory.index.flush()
        yield memory.view


@asynccontextmanager
async def list_view(root: Path) -> AsyncIterator[MemoryView]:
    yield ListMemoryView(MEMORIES)


@pytest.fixture(params=["index", "list"])
async def view(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryView]:
    opened = index_view if request.param == "index" else list_view
    async with opened(tmp_path) as v:
        assert isinstance(v, MemoryView)
        yield v


def ids(items: list[MemoryItem]) -> list[str]:
    return [i.id for i in items]


async def test_each_list_holds_its_kinds_newest_first(view: MemoryView) -> None:
    assert ids(await view.profile_facts(5)) == ["profile:2", "profile:1"]
    assert ids(await view.recent_facts(5)) == ["fact:2", "fact:1"]
    assert ids(await view.recent_summaries(5)) == ["summary:s1"]
    # Every kind but chunks: the recent themes.
    assert ids(await view.recent_entries(10)) == [
        "summary:s1",
        "profile:2",
        "fact:2",
        "profile:1",
        "fact:1",
    ]


async def test_lists_keep_to_their_limit(view: MemoryView) -> None:
    assert ids(await view.recent_facts(1)) == ["fact:2"]
    assert ids(await view.recent_entries(2)) == ["summary:s1", "profile:2"]
    for ask in (view.profile_facts, view.recent_facts, view.recent_summaries, view.recent_entries):
        assert await ask(0) == []


async def test_auto_recall_finds_what_the_prompt_names_once_each(view: MemoryView) -> None:
    found = await view.auto_recall("How is my sister Ada doing in Lisbon?", limit=6)
    assert "fact:1" in ids(found)
    assert len(ids(found)) == len(set(ids(found))) <= 6
    assert len(await view.auto_recall("How is my sister Ada doing in Lisbon?", limit=1)) == 1


async def test_auto_recall_leaves_out_excluded_ids(view: MemoryView) -> None:
    found = await view.auto_recall(
        "How is my sister Ada doing in Lisbon?", exclude_ids=frozenset({"fact:1"}), limit=6
    )
    assert "fact:1" not in ids(found)


async def test_auto_recall_leaves_out_what_the_live_history_shows(view: MemoryView) -> None:
    prompt = "the photos of the octopus lab in Lisbon"
    assert "chunk:s1:1" in ids(await view.auto_recall(prompt, limit=6))
    live = LiveHistory(session="s1", message_ids=frozenset({"m1"}))
    assert "chunk:s1:1" not in ids(await view.auto_recall(prompt, limit=6, live=live))


async def test_auto_recall_brings_nothing_for_what_it_never_heard_of(view: MemoryView) -> None:
    assert await view.auto_recall("quantum chromodynamics lecture", limit=6) == []
    assert await view.auto_recall("   ", limit=6) == []
