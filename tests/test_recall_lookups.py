"""Automatic recall's later-word lookups read the index its search just refreshed (issue 34).

A turn's search refreshes the index once; the lookups that follow it (a later change of a
subject, of a name, the mention links' passages, the labels of changed facts and the
corrections) read that same generation — one read of it a turn, whatever the lookups find —
and each lookup still finds what a search of its own would. A real SQLite home with months of
ordinary talk; the statements are watched through SQLite's own trace hook.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.memory.lookups import Lookup, lexical_lookups
from tests.sleep_phase_support import START, SleepRig, sleep_home
from tests.test_recall_newest import _talk

pytestmark = pytest.mark.anyio

CHANGES = {
    8: "We chose Nordbygg for the renovation of the kitchen.",
    100: "Hearth Works took over the kitchen from Nordbygg.",
    200: "Hearth Works went bust, Calloway is finishing the kitchen instead.",
    220: "The plan for the garden is a greenhouse by the fence.",
    280: "We gave up on the greenhouse, the garden gets a pond now.",
}


async def _home(rig: SleepRig) -> None:
    rng = random.Random(6)
    for day in range(0, 300, 4):
        await _talk(rig, rng, day, CHANGES.get(day, ""))
    rig.clock.set(START + timedelta(days=310))


async def test_a_turn_reads_the_index_generation_once_and_still_finds_every_change(
    tmp_path: Path,
) -> None:
    """Two subjects changed later (a firm twice, by name; the garden plan, by words): the
    context shows both changes first, and the whole turn — search, later-word lookups of the
    subjects and of the names, chained, change labels, corrections — reads `memory.generation`
    once (each lookup used to refresh the index: one read each)."""
    with anyio.fail_after(180):
        async with sleep_home(tmp_path / "home") as rig:
            await _home(rig)
            view, db = rig.memory.view, rig.memory.index.db
            await view.auto_recall("a warm-up turn about nothing in particular")
            recalled: dict[str, list[str]] = {}
            for asked in (
                "which firm did we choose for the renovation?",
                "what is the plan for the garden?",
            ):
                seen: list[str] = []
                await db.run(lambda conn, seen=seen: conn.set_trace_callback(seen.append))
                try:
                    recalled[asked] = [i.text for i in await view.auto_recall(asked)]
                finally:
                    await db.run(lambda conn: conn.set_trace_callback(None))
                reads = [s for s in seen if "memory.generation" in s]
                assert len(reads) == 1, (asked, reads)
            firms, gardens = recalled.values()
            assert any("We chose Nordbygg" in t for t in firms), firms
            [firm] = [t for t in firms if "We chose Nordbygg" in t]
            assert firm.index("Calloway") < firm.index("took over") < firm.index("earlier: "), firm
            [garden] = [t for t in gardens if "greenhouse by the fence" in t]
            assert garden.startswith("[said later, ") and "pond" in garden, garden


async def test_each_lookup_finds_what_a_lexical_search_of_its_own_finds(tmp_path: Path) -> None:
    """Lookups of several queries, times and kinds in one trip give, each, the memories and
    order and scores `MemorySearch.search(mode="lexical")` gives for it; an empty query finds
    nothing."""
    with anyio.fail_after(180):
        async with sleep_home(tmp_path / "home") as rig:
            await _home(rig)
            index = rig.memory.index
            lookups = [
                Lookup(query="kitchen Nordbygg", k=10, after=START + timedelta(days=30)),
                Lookup(query="Hearth Works", k=3),
                Lookup(query="   ", k=5),
                Lookup(query="garden greenhouse pond", k=20, after=START + timedelta(days=250)),
                Lookup(query="dinner Friday table", k=8, kinds=("chunk", "summary")),
                Lookup(query="printer jammed", k=0),
            ]
            await index.search("anything", k=1)  # the refresh a turn's search makes
            found = await lexical_lookups(index.searcher, lookups)
            assert len(found) == len(lookups)
            for lookup, got in zip(lookups, found, strict=True):
                want = await index.search(
                    lookup.query,
                    k=lookup.k,
                    kinds=lookup.kinds,
                    mode="lexical",
                    after=lookup.after,
                )
                assert [(i.id, i.score) for i in got] == [(i.id, i.score) for i in want], lookup
                assert all(i.ts and i.ts >= lookup.after for i in got if lookup.after), lookup
            assert found[0] and found[1] and found[3] and found[4]
            assert found[2] == [] and found[5] == []
            # Written after the 250th day: the greenhouse plan (day 220) is not among them.
            assert not any("by the fence" in i.text for i in found[3])
            assert any("pond" in i.text for i in found[3])
