"""`RepliesRepo` (daemon/store/replies.py): the trunk's past replies and the model of each
turn, the handover letter's voice samples — one contract, on SQLite and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.context.letter import voice_samples
from daemon.store.db import Database
from daemon.store.replies import PastReply, RepliesRepo, TurnModel
from daemon.store.usage import UsageEntry, UsageRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def _session(db: Database, sid: str, kind: str) -> None:
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)",
        (sid, kind, f"{sid}.jsonl", T0.isoformat()),
    )


async def _message(
    db: Database, sid: str, seq: int, role: str, text: str, minutes: int, turn: str | None
) -> None:
    await db.execute(
        "INSERT INTO messages(session_id, seq, msg_id, turn_id, role, content, ts)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, seq, f"m{seq}", turn, role, text, (T0 + timedelta(minutes=minutes)).isoformat()),
    )


@pytest.mark.anyio
async def test_trunk_replies_are_the_agents_in_trunk_sessions_newest_first(store: Store) -> None:  # noqa: F811
    async with store.open("messages", "sessions") as db:
        await _session(db, "trunk-1", "trunk")
        await _session(db, "trunk-2", "trunk")
        await _session(db, "fork-1", "fork")
        await _message(db, "trunk-1", 0, "user", "hello there", 0, "turn-1")
        await _message(db, "trunk-1", 1, "assistant", "first reply", 1, "turn-1")
        await _message(db, "trunk-2", 0, "assistant", "a later reply", 30, None)
        await _message(db, "trunk-2", 1, "tool", "tool output", 31, "turn-2")
        await _message(db, "fork-1", 0, "assistant", "a fork's words", 40, "turn-3")
        repo = RepliesRepo(db)
        assert await repo.trunk_replies() == [
            PastReply(
                content="a later reply",
                ts=(T0 + timedelta(minutes=30)).isoformat(),
                turn_id=None,
                session_id="trunk-2",
            ),
            PastReply(
                content="first reply",
                ts=(T0 + timedelta(minutes=1)).isoformat(),
                turn_id="turn-1",
                session_id="trunk-1",
            ),
        ]
        assert [r.content for r in await repo.trunk_replies(limit=1)] == ["a later reply"]


@pytest.mark.anyio
async def test_trunk_models_are_the_ledgers_trunk_rows_for_the_turns_asked(store: Store) -> None:  # noqa: F811
    async with store.open("usage_ledger") as db:
        usage = UsageRepo(db)

        def call(turn: str, role: str, provider: str, model: str) -> UsageEntry:
            return UsageEntry(
                ts=T0.isoformat(),
                day="2026-03-02",
                role=role,
                provider=provider,
                model=model,
                input_tokens=1,
                output_tokens=1,
                cache_read_tokens=0,
                cache_write_tokens=0,
                cost_usd=0.0,
                turn_id=turn,
            )

        await usage.add(call("turn-1", "trunk", "anthropic", "claude-a"))
        await usage.add(call("turn-2", "trunk", "offline", "offline"))
        await usage.add(call("turn-2", "summariser", "anthropic", "claude-s"))
        await usage.add(call("turn-3", "trunk", "anthropic", "claude-b"))
        repo = RepliesRepo(db)
        found = await repo.trunk_models(["turn-1", "turn-2", "turn-9"])
        assert sorted(found, key=lambda t: t.turn_id) == [
            TurnModel(turn_id="turn-1", provider="anthropic", model="claude-a"),
            TurnModel(turn_id="turn-2", provider="offline", model="offline"),
        ]
        assert await repo.trunk_models([]) == []


@pytest.mark.anyio
async def test_the_letters_voice_prefers_the_handing_over_model(store: Store) -> None:  # noqa: F811
    """The handover letter's voice samples read through the repository: the model handing over
    (a dated name is the same model) first, one reply per session, a fork's words never, the
    offline model's left out once a real model has spoken."""
    says = {
        "offline": "I'm the offline model: I can keep notes, but I cannot think this through.",
        "a-old": "Morning! Shall we start with the garden plan or with the tax forms today?",
        "a-new": "Done: the garden plan is in your notes, and the seed order goes out Friday.",
        "gpt": "I moved the dentist to Thursday at ten and told Sam about the new time too.",
        "fork": "A fork's findings: three nurseries stock the roses you asked about nearby.",
    }
    async with store.open("messages", "sessions", "usage_ledger") as db:
        for sid, kind in (("t-1", "trunk"), ("t-2", "trunk"), ("t-3", "trunk"), ("f-1", "fork")):
            await _session(db, sid, kind)
        for seq, (sid, key, turn, minutes) in enumerate(
            [
                ("t-1", "offline", "o1", 1),
                ("t-2", "a-old", "a1", 2),
                ("t-2", "a-new", "a2", 3),
                ("t-3", "gpt", "g1", 4),
                ("f-1", "fork", "f1", 5),
            ]
        ):
            await _message(db, sid, seq, "assistant", says[key], minutes, turn)
        usage = UsageRepo(db)
        for turn, provider, model in (
            ("o1", "offline", "offline"),
            ("a1", "anthropic", "claude-a-20260101"),
            ("a2", "anthropic", "claude-a-20260101"),
            ("g1", "openai", "gpt"),
        ):
            await usage.add(
                UsageEntry(
                    ts=T0.isoformat(),
                    day="2026-03-02",
                    role="trunk",
                    provider=provider,
                    model=model,
                    input_tokens=1,
                    output_tokens=1,
                    cache_read_tokens=0,
                    cache_write_tokens=0,
                    cost_usd=0.0,
                    turn_id=turn,
                )
            )
        samples = await voice_samples(db, prefer="anthropic:claude-a", limit=3)
    assert samples == [("2026-03-02", says["a-new"]), ("2026-03-02", says["gpt"])]
