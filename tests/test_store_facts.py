"""The facts' repository (`daemon/store/facts.py`) and the person's last words
(`SessionsRepo.person_words`): one contract, on SQLite and on the real PostgreSQL server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.store.db import Database
from daemon.store.facts import FactsRepo, FactUse
from daemon.store.sessions import PersonWord, SessionsRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def add_memory(db: Database, uid: str, kind: str = "fact", **cols: object) -> None:
    names = ["uid", "kind", "text", "origin", "created_at", "source", "content_hash", *cols]
    values = [uid, kind, f"text of {uid}", "person", T0.isoformat(), "facts.jsonl", f"h-{uid}"]
    await db.execute(
        f"INSERT INTO memories({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        (*values, *cols.values()),
    )


async def row(db: Database, uid: str, *cols: str) -> tuple[object, ...]:
    found = await db.fetchone(f"SELECT {', '.join(cols)} FROM memories WHERE uid = ?", (uid,))
    return tuple(found)


async def test_a_fact_said_again_is_confirmed_only_forward(store: Store) -> None:  # noqa: F811
    async with store.open("memories") as db:
        facts = FactsRepo(db)
        await add_memory(db, "fact:1")
        await facts.confirm("fact:1", T0 + timedelta(days=2))
        assert await row(db, "fact:1", "confirmed_at") == ("2026-03-04T09:00:00.000000+00:00",)
        await facts.confirm("fact:1", T0 + timedelta(days=1))  # older news: kept as it was
        assert await row(db, "fact:1", "confirmed_at") == ("2026-03-04T09:00:00.000000+00:00",)
        await facts.confirm("fact:1", T0 + timedelta(days=3))
        assert await row(db, "fact:1", "confirmed_at") == ("2026-03-05T09:00:00.000000+00:00",)
        await facts.confirm("fact:9", T0)  # no such fact: nothing happens
        assert await db.fetchone("SELECT uid FROM memories WHERE uid = 'fact:9'") is None


async def test_uses_are_read_for_facts_and_profile_only(store: Store) -> None:  # noqa: F811
    async with store.open("memories") as db:
        await add_memory(db, "fact:1", uses=4, last_used="2026-03-02T10:00:00+00:00")
        await add_memory(db, "fact:2", kind="profile")
        await add_memory(db, "summary:a", kind="summary", uses=9)
        uses = sorted(await FactsRepo(db).uses(), key=lambda u: u.uid)
        assert uses == [
            FactUse(uid="fact:1", uses=4, last_used="2026-03-02T10:00:00+00:00"),
            FactUse(uid="fact:2", uses=0, last_used=None),
        ]


async def test_the_persons_words_are_theirs_newest_first(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        sessions = SessionsRepo(db)
        assert await sessions.person_words(3) == []
        for sid, kind, title in (
            ("trunk-1", "trunk", "Planning the trip"),
            ("fork-1", "fork", None),
            ("imp-1", "imported", None),
        ):
            await db.execute(
                "INSERT INTO sessions(id, kind, transcript_path, started_at, title, summary_path)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (sid, kind, f"{sid}.jsonl", T0.isoformat(), title,
                 "memory/sessions/s__old-letters.md" if sid == "imp-1" else None),
            )  # fmt: skip
        said = [
            ("trunk-1", 0, "user", "Book the train", 0),
            ("trunk-1", 1, "assistant", "Booked.", 1),
            ("fork-1", 0, "user", "A fork's brief is not the person's", 5),
            ("imp-1", 0, "user", "An old letter", -60),
            ("trunk-1", 2, "user", "And a hotel", 3),
        ]
        for sid, seq, role, content, minutes in said:
            await db.execute(
                "INSERT INTO messages(session_id, seq, msg_id, role, content, ts)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (sid, seq, f"{sid}-m{seq}", role, content,
                 (T0 + timedelta(minutes=minutes)).isoformat()),
            )  # fmt: skip
        words = await sessions.person_words(3)
        assert words == [
            PersonWord(ts=(T0 + timedelta(minutes=3)).isoformat(), session_id="trunk-1",
                       msg_id="trunk-1-m2", content="And a hotel", title="Planning the trip",
                       summary_path=None),
            PersonWord(ts=T0.isoformat(), session_id="trunk-1", msg_id="trunk-1-m0",
                       content="Book the train", title="Planning the trip", summary_path=None),
            PersonWord(ts=(T0 - timedelta(minutes=60)).isoformat(), session_id="imp-1",
                       msg_id="imp-1-m0", content="An old letter", title=None,
                       summary_path="memory/sessions/s__old-letters.md"),
        ]  # fmt: skip
        assert [w.msg_id for w in await sessions.person_words(1)] == ["trunk-1-m2"]
