"""The hybrid index over a real SQLite file: writes, supersession, search modes, chunking, refresh."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder, NoEmbedder
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose
from daemon.memory.rows import NewMemory
from daemon.settings import MemorySettings
from daemon.store.db import Database

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


@asynccontextmanager
async def opened(
    path: Path, embedder: Embedder | None = None, **settings: object
) -> AsyncIterator[MemoryIndex]:
    async with await Database.open(path) as db:
        index = MemoryIndex(
            db, embedder or HashEmbedder(), MemorySettings(**settings), FakeClock(T0)
        )
        async with index:
            yield index


def fact(n: int, text: str, *, days: int = 0, **kw: object) -> NewMemory:
    return NewMemory(
        uid=f"fact:{n}",
        kind="fact",
        text=text,
        origin="person",
        created_at=T0 + timedelta(days=days),
        **kw,
    )  # type: ignore[arg-type]


FACTS = [
    fact(1, "My sister Ana lives in Porto and works as an architect", days=1),
    fact(2, "I am allergic to peanuts", days=2, explicit=True),
    fact(3, "The Reverie project deploys with systemd on a small VPS", days=3),
    fact(4, "We adopted a grey cat named Miso last spring", days=4),
]


@pytest.mark.anyio
@pytest.mark.parametrize("embedder", [NoEmbedder(), HashEmbedder()], ids=["none", "hash"])
async def test_upsert_get_search_roundtrip(tmp_path: Path, embedder: Embedder) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite", embedder) as index:
            await index.upsert(FACTS)
            await index.upsert(FACTS)  # idempotent
            await index.flush()
            got = await index.get("fact:1")
            assert (
                got is not None and got.text.startswith("My sister Ana") and got.origin == "person"
            )
            assert await index.get("fact:nope") is None
            hits = await index.search("where does my sister live?", k=2)
            assert hits[0].id == "fact:1" and hits[0].score > 0
            lexical = await index.search("peanut allergy", k=3, mode="lexical")
            assert [h.id for h in lexical][:1] == ["fact:2"]
            stats = await index.stats()
            assert stats["memories"] == 4
            assert stats["pending_vectors"] == 0
            if embedder.dim:
                vec = await index.search("grey cat Miso", k=1, mode="vector")
                assert vec[0].id == "fact:4"
                assert stats["with_vector"] == 4
            else:
                assert await index.search("grey cat", mode="vector") == []


@pytest.mark.anyio
async def test_supersession_retires_and_history_is_ordered(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite") as index:
            await index.upsert(FACTS)
            await index.upsert(
                [fact(5, "My sister Ana moved from Porto to Berlin", days=10, supersedes="fact:1")]
            )
            await index.upsert(
                [fact(6, "My sister Ana moved to Vienna", days=20, supersedes="fact:5")]
            )
            hits = await index.search("sister Ana city", k=5)
            ids = [h.id for h in hits]
            assert "fact:6" in ids and "fact:1" not in ids and "fact:5" not in ids
            with_old = await index.search("sister Ana Porto", k=5, include_retired=True)
            assert "fact:1" in [h.id for h in with_old]
            chain = await index.history("fact:5")
            assert [m.id for m in chain] == ["fact:1", "fact:5", "fact:6"]
            old = await index.get("fact:1")
            assert (
                old is not None and old.meta["superseded_by"] == "fact:5" and old.meta["retired_at"]
            )
            await index.retire("fact:3", at=T0 + timedelta(days=30))
            assert "fact:3" not in [h.id for h in await index.search("Reverie systemd VPS", k=5)]
            with pytest.raises(KeyError):
                await index.retire("fact:404", at=T0)


@pytest.mark.anyio
async def test_filters_kinds_time_and_recent(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite") as index:
            await index.upsert(
                [
                    *FACTS,
                    NewMemory(
                        uid="summary:s1",
                        kind="summary",
                        text="We talked about Ana's architecture work in Porto",
                        origin="agent",
                        created_at=T0 + timedelta(days=5),
                        title="Ana and Porto",
                    ),
                ]
            )
            only_summaries = await index.search("Ana Porto", kinds=["summary"])
            assert [h.id for h in only_summaries] == ["summary:s1"]
            early = await index.search("Ana Porto architect", before=T0 + timedelta(days=2))
            assert [h.id for h in early] == ["fact:1"]
            late = await index.search("Ana Porto architect", after=T0 + timedelta(days=2))
            assert "fact:1" not in [h.id for h in late]
            recent = await index.recent(["fact"], 2)
            assert [m.id for m in recent] == ["fact:4", "fact:3"]
            assert await index.search("", k=5) == []
            with pytest.raises(ValueError, match="unknown search mode"):
                await index.search("x", mode="fuzzy")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_wide_kinds_filter_is_checked_on_the_best_hits_as_sql_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Automatic recall's kinds (all but month and journal) let most rows through: the best
    full-text hits are filtered by what the matrix knows of each row instead of a SQL join.
    What comes back is what the join returns: no other kind, nothing retired."""
    from daemon.memory import lexical

    chunks = [
        NewMemory(
            uid=f"chunk:c{i}",
            kind="chunk",
            text=f"note {i}: the garden tomatoes " + "and the weather " * (i % 7),
            origin="person",
            created_at=T0 + timedelta(days=i),
        )
        for i in range(40)
    ]
    strongest = "garden tomatoes garden tomatoes in the garden"
    others = [
        NewMemory(uid="journal:j1", kind="journal", text=strongest, origin="agent", created_at=T0),
        fact(90, strongest, days=1),
    ]
    wide = ["fact", "profile", "summary", "chunk"]
    with anyio.fail_after(30):
        async with opened(tmp_path / "db.sqlite", NoEmbedder()) as index:
            await index.upsert([*chunks, *others])
            await index.retire("fact:90", at=T0 + timedelta(days=2))
            assert index.matrix.kind_share(wide) >= lexical.WIDE_SHARE
            fast = [h.id for h in await index.search("garden tomatoes", k=50, kinds=wide)]
            monkeypatch.setattr(lexical, "WIDE_SHARE", 2.0)  # every filter joined in SQL
            joined = [h.id for h in await index.search("garden tomatoes", k=50, kinds=wide)]
            assert "journal:j1" not in fast and "fact:90" not in fast
            assert sorted(fast) == sorted(joined) and len(fast) == 40
            with_old = await index.search("garden tomatoes", k=50, kinds=wide, include_retired=True)
            assert "fact:90" in [h.id for h in with_old]


@pytest.mark.anyio
async def test_explicit_facts_are_surfaced_first(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite", NoEmbedder()) as index:
            await index.upsert(
                [
                    fact(1, "Coffee order: oat flat white", days=9),
                    fact(2, "Coffee order: oat flat white please", days=1, explicit=True),
                ]
            )
            hits = await index.search("coffee order")
            assert hits[0].id == "fact:2"


@pytest.mark.anyio
@pytest.mark.parametrize("embedder", [NoEmbedder(), HashEmbedder()], ids=["none", "hash"])
async def test_similar_finds_near_duplicates_only(tmp_path: Path, embedder: Embedder) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite", embedder) as index:
            await index.upsert(FACTS)
            await index.flush()
            dup = await index.similar("I am allergic to peanuts", ["fact"], 0.9)
            assert [m.id for m in dup] == ["fact:2"] and dup[0].score >= 0.9
            assert await index.similar("I love peanuts and chocolate cake", ["fact"], 0.9) == []
            assert await index.similar("I am allergic to peanuts", ["profile"], 0.9) == []


async def _add_session(
    db: Database, sid: str, messages: list[tuple[str, str, str]], start: int = 0
) -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, 'trunk', ?, ?)"
        " ON CONFLICT DO NOTHING",
        (sid, f"/t/{sid}.jsonl", T0.isoformat()),
    )
    for i, (role, speaker, content) in enumerate(messages, start):
        await db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, speaker, content) VALUES (?,?,?,?,?,?,?)",
            (
                sid,
                f"{sid}-m{i}",
                i,
                (T0 + timedelta(minutes=i)).isoformat(),
                role,
                speaker,
                content,
            ),
        )


@pytest.mark.anyio
async def test_index_session_chunks_incrementally_with_exact_message_ids(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite", chunk_messages=4) as index:
            msgs = [("user", "Sam", f"message number {i} about topic{i}") for i in range(5)]
            await _add_session(index.db, "s1", msgs)
            first = await index.index_session("s1")
            assert (
                first == 5 + 2
            )  # five single-message chunks, windows at 0 and 2 (a lone message is no window)
            assert await index.index_session("s1") == 0
            hit = (await index.search("topic3", k=1, kinds=["chunk"]))[0]
            assert hit.id == "chunk:s1:3" and hit.message_ids == ("s1-m3",) and hit.session == "s1"
            assert "Sam (1 January 2026)" in hit.text and hit.source == "/t/s1.jsonl"
            await _add_session(
                index.db, "s1", [("assistant", None, "a reply mentioning topic5")], start=5
            )  # type: ignore[list-item]
            assert (
                await index.index_session("s1") == 2
            )  # the new message and the window it completes
            window = await index.get("chunk:s1:4-w")
            assert window is not None and window.message_ids == ("s1-m4", "s1-m5")
            with pytest.raises(KeyError):
                await index.index_session("nope")


@pytest.mark.anyio
async def test_reader_sees_another_connections_writes(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with anyio.fail_after(20):
        async with opened(path) as reader:
            await reader.upsert(FACTS[:1])
            await reader.flush()
            assert len(reader.matrix) == 1
            async with opened(path) as writer:  # e.g. a CLI import while the daemon runs
                await writer.upsert(FACTS[1:])
                await writer.flush()
            hits = await reader.search("grey cat Miso", k=1, mode="vector")
            assert hits[0].id == "fact:4" and len(reader.matrix) == 4
            await reader.clear()
            assert await reader.search("Miso") == [] and len(reader.matrix) == 0


@pytest.mark.anyio
async def test_model_change_reembeds_in_background_and_reuses_cache(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    with anyio.fail_after(20):
        async with opened(path, HashEmbedder(256)) as index:
            await index.upsert(FACTS)
            await index.flush()
        async with opened(path, HashEmbedder(128)) as index:
            # Entering wakes the background task, which embeds for the new model on its own.
            while (await index.stats())["pending_vectors"]:
                await anyio.sleep(0.01)
            assert (await index.search("grey cat", k=1, mode="vector"))[0].id == "fact:4"
            await index.clear()
            await index.upsert(FACTS)  # same texts: vectors come from the cache
            stats = await index.stats()
            assert stats["pending_vectors"] == 0 and stats["cached_embeddings"] == 8


@pytest.mark.anyio
async def test_search_plan_time_window_is_a_preference(tmp_path: Path) -> None:
    with anyio.fail_after(20):
        async with opened(tmp_path / "db.sqlite") as index:
            await index.upsert(
                [
                    fact(1, "Booked the trip to Lisbon", days=10),
                    fact(2, "I said I wanted to learn the guitar", days=5),
                    fact(3, "I said I wanted to learn Portuguese", days=15),
                ]
            )
            plan = decompose(
                "what did I say I wanted to learn before my trip?", now=T0 + timedelta(days=20)
            )
            hits = await index.search_plan(plan, k=3)
            assert hits[0].id == "fact:2"
            assert {h.id for h in hits} >= {
                "fact:2",
                "fact:3",
            }  # outside the window still fills the list


def test_lexical_match_keeps_the_rarest_terms_within_the_budget() -> None:
    from daemon.memory.lexical import LexicalSearcher

    lex = LexicalSearcher(budget=100)
    df = {'"caroline"': 90, '"lgbtq"': 3, '"support"': 40, '"group"': 50, '"absent"': 0}
    phrases = ['"caroline"', '"lgbtq"', '"support"', '"group"', '"absent"']
    # Over budget (183 rows): the commonest terms go, query order is kept.
    assert lex.match(phrases, df) == '"lgbtq" OR "support" OR "group"'
    assert lex.match(['"lgbtq"', '"support"'], df) == '"lgbtq" OR "support"'
    # Every term too common on its own: their conjunction instead; nothing to match: None.
    assert (
        lex.match(['"caroline"', '"group"'], {'"caroline"': 900, '"group"': 500})
        == '"caroline" AND "group"'
    )
    assert lex.match(['"absent"'], df) is None
    assert lex.informative("lgbtq", df, rows=1000) and not lex.informative(
        "Caroline", df, rows=1000
    )


@pytest.mark.anyio
async def test_common_words_are_pruned_but_rare_evidence_is_found(tmp_path: Path) -> None:
    # 300 memories by "Caroline", one of them about the support group: with a tiny budget the
    # name and "group" are dropped from BM25 and the evidence still leads. (That a name-only
    # sub-query is skipped is measured by the dialogue recall test.)
    filler = [
        fact(
            100 + i,
            f"Caroline said the weather was nice on day {i} and the group chat was busy",
            days=i % 40,
        )
        for i in range(300)
    ]
    evidence = fact(7, "Caroline went to an LGBTQ support group yesterday, it was powerful", days=3)
    with anyio.fail_after(30):
        async with opened(tmp_path / "db.sqlite", NoEmbedder()) as index:
            await index.upsert([*filler, evidence])
            index.lexical.budget = 50
            hits = await index.search(
                "When did Caroline go to the LGBTQ support group?", k=3, mode="lexical"
            )
            assert hits[0].id == "fact:7"
            plan = decompose("When did Caroline go to the LGBTQ support group?", now=T0)
            assert "Caroline" in plan.all_queries()
            top = await index.search_plan(plan, k=3, mode="lexical")
            assert top[0].id == "fact:7"
            # Retired memories are filtered after the LIMIT without losing the live ones.
            await index.retire("fact:7", at=T0 + timedelta(days=50))
            after = await index.search("LGBTQ support group", k=3, mode="lexical")
            assert "fact:7" not in [h.id for h in after]
            assert await index.search(
                "LGBTQ support group", k=3, mode="lexical", include_retired=True
            )
