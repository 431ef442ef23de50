"""The memories' full-text index (`FullText`, `PgFullText`): FTS5 on SQLite, a tsvector on
PostgreSQL, written per dialect behind the same calls — and giving the same answers, which each
test checks on both backends (`tests.test_store_repos`'s fixture).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from daemon.store.fulltext import FullText, PgFullText, TextFilter, full_text
from daemon.store.memories import MemoriesRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_memories import TABLES, mem
from tests.test_store_repos import Store, store  # noqa: F401

TEXTS = [
    ("fact:1", "Ana fixed the kiln on Monday", "fact", None),
    ("fact:2", "Ben sold the boat on Friday", "fact", None),
    ("chunk:3", "Caro and Ana talked about the kiln glaze", "chunk", "s1"),
    ("chunk:4", "the kiln cracked again", "chunk", "s2"),
    ("summary:5", "a quiet week", "summary", "s2"),
]


async def _fill(repo: MemoriesRepo) -> None:
    await repo.upsert(
        [
            mem(uid, text, kind=kind, session_id=session, created_at=f"2026-03-0{i + 1}T00:00:00Z")
            for i, (uid, text, kind, session) in enumerate(TEXTS)
        ]
    )


@pytest.mark.anyio
async def test_full_text_counts_ranks_filters_and_reads_text(store: Store) -> None:  # noqa: F811
    async with store.open(*TABLES) as db:
        repo = MemoriesRepo(db)
        await _fill(repo)
        text = full_text(db.is_postgres)
        assert isinstance(text, PgFullText) is db.is_postgres and isinstance(text, FullText)
        uid_of = {(await repo.get(u)).rowid: u for u, *_ in TEXTS}  # type: ignore[union-attr]

        def run(fn: Any, *args: Any, **kw: Any) -> Any:
            return db.run(lambda conn: fn(conn, *args, **kw))

        assert await run(text.count, '"kiln"') == 3
        assert await run(text.count, '"kilns"') == 3  # stemmed on both
        assert await run(text.count, '"boa"*') == 1  # a prefix
        assert await run(text.count, '"zebra"') == 0
        # A phrase holds only where its words are adjacent.
        assert await run(text.count, '"kiln glaze"') == 1

        ranked = [uid_of[r] for r in await run(text.ranked, '"kiln" OR "ana"', 10)]
        assert set(ranked) == {"fact:1", "chunk:3", "chunk:4"}
        assert ranked[-1] == "chunk:4"  # holds one of the two words
        assert len(await run(text.ranked, '"kiln"', 2)) == 2

        await repo.retire("fact:1", at="2026-03-09T00:00:00Z")
        joined = await run(text.joined, '"kiln"', 10, TextFilter())
        assert {uid_of[r] for r in joined} == {"chunk:3", "chunk:4"}  # the retired one left out
        every = await run(text.joined, '"kiln"', 10, TextFilter(include_retired=True))
        assert {uid_of[r] for r in every} == {"fact:1", "chunk:3", "chunk:4"}
        facts = await run(
            text.joined, '"kiln"', 10, TextFilter(kinds=("fact",), include_retired=True)
        )
        assert [uid_of[r] for r in facts] == ["fact:1"]
        window = TextFilter(after="2026-03-03T00:00:00Z", before="2026-03-04T00:00:00Z")
        assert [uid_of[r] for r in await run(text.joined, '"kiln"', 10, window)] == ["chunk:3"]
        assert await run(text.joined, '"kiln"', 10, replace(window, kinds=("summary",))) == []

        said = await run(text.matching, '"kiln"', kind="chunk", limit=10)
        assert sorted((s.session_id, s.text) for s in said) == [
            ("s1", "Caro and Ana talked about the kiln glaze"),
            ("s2", "the kiln cracked again"),
        ]
        # Input never changes the query's shape: quotes and operators are words or nothing.
        assert await run(text.count, '"\'); DROP TABLE memories; --"') == 0
        assert await repo.get("fact:2") is not None
