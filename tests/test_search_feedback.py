"""Pseudo-relevance feedback in a planned search (daemon/memory/search.py `_feedback`).

The question's vector, moved towards its best hits, ranks a memory that shares no word with
the question but its subject with what answered it; automatic recall does without it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.commands.ops import search_batch
from daemon.memory.embedders import MiniLMEmbedder, minilm_available
from daemon.memory.query import decompose
from daemon.memory.rows import NewMemory
from tests.test_memory_index import T0, opened

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not minilm_available(), reason="all-MiniLM-L6-v2 weights not installed"),
]

CHORES = [
    "the train to Lyon was delayed by signal failure near the station",
    "our landlord finally replaced the broken boiler in the basement",
    "the quarterly budget review moved to the large meeting room",
    "a neighbour's dog barked through most of the night again",
    "we compared three mobile phone contracts and picked the cheapest",
    "the dentist wants another check of the upper molar in March",
    "the library extended the loan on the history of Venice",
    "the car needs new tyres before the winter inspection",
    "my manager asked for the slides by Thursday noon",
    "the tax office sent a letter about last year's return",
    "I switched the bank account to one without monthly fees",
    "the printer at work jams whenever someone prints double-sided",
    "we need to renew the passports before the autumn",
    "the plumber said the pipes under the sink are corroded",
    "the insurance premium went up by eight percent this year",
    "my laptop battery barely lasts two hours now",
    "the council is repaving our street next month",
    "I keep forgetting the password for the electricity account",
    "the conference registration closes on the fifteenth",
    "the fridge makes a humming noise at night",
]


def memory(n: int, text: str) -> NewMemory:
    return NewMemory(
        uid=f"fact:{n}",
        kind="fact",
        text=text,
        origin="person",
        created_at=T0 + timedelta(hours=n),
    )  # type: ignore[arg-type]


async def test_the_best_hit_brings_what_shares_its_subject(tmp_path: Path) -> None:
    answer = memory(
        100, "took the children camping by the lake, they loved the campfire and the tent"
    )
    related = memory(101, "roasted marshmallows by the fire and slept in a tent under the stars")
    question = decompose("what do we do outdoors with the children?")
    async with opened(tmp_path / "db.sqlite", MiniLMEmbedder()) as index:
        await index.upsert([*(memory(i, t) for i, t in enumerate(CHORES)), answer, related])
        await index.flush()
        with anyio.fail_after(30):
            searched = await index.search_plan(question, k=2)
            # `memory search` (hybrid: one vector pass per question) ranks with it too.
            [batch] = await search_batch(
                index, ["what do we do outdoors with the children?"], now=T0, k=2
            )
            # As automatic recall asks: without the moved vector.
            recalled = await index.search_plan(question, k=2, vector_queries=1, feedback=False)
    assert [i.id for i in searched] == ["fact:100", "fact:101"]
    assert [r["id"] for r in batch] == ["fact:100", "fact:101"]
    assert [i.id for i in recalled][:1] == ["fact:100"]
    assert "fact:101" not in [i.id for i in recalled]
