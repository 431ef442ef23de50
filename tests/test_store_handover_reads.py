"""What the handover reads from the store besides its `kv` notes: the trunk's last call in the
usage ledger (`UsageRepo.last_call`) and the self-exams' scores (`ExamsRepo.score`) — on SQLite
and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from daemon.store.exams import ExamsRepo
from daemon.store.usage import UsageEntry, UsageRepo
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def call(minutes: int, role: str, model: str, **kw: object) -> UsageEntry:
    return UsageEntry(
        ts=(T0 + timedelta(minutes=minutes)).isoformat(),
        day="2026-03-02",
        role=role,
        provider="anthropic",
        model=model,
        input_tokens=10,
        output_tokens=2,
        cache_read_tokens=0,
        cache_write_tokens=0,
        cost_usd=0.01,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.anyio
async def test_the_last_call_of_a_role_is_the_one_recorded_last(store: Store) -> None:  # noqa: F811
    async with store.open("usage_ledger") as db:
        usage = UsageRepo(db)
        assert await usage.last_call("trunk") is None
        first = call(0, "trunk", "claude-a", session_id="trunk-1", turn_id="t1")
        await usage.add(first)
        # Recorded last wins, whatever its time says (a clock set back).
        last = call(-30, "trunk", "claude-b")
        await usage.add(last)
        await usage.add(call(60, "sleep", "claude-c"))
        assert await usage.last_call("trunk") == last
        assert await usage.last_call("sleep") == call(60, "sleep", "claude-c")
        assert await usage.last_call("fork") is None


@pytest.mark.anyio
async def test_exam_scores_newest_or_first_after_a_time(store: Store) -> None:  # noqa: F811
    async with store.open("self_exams") as db:
        exams = ExamsRepo(db)
        assert await exams.score() is None and await exams.score(after=T0) is None
        for cycle, hours, score in (("c1", 0, 0.5), ("c2", 24, 0.75), ("c3", 48, 0.25)):
            await db.execute(
                "INSERT INTO self_exams(cycle_id, taken_at, score, questions, hits, worded_by,"
                " items) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cycle, (T0 + timedelta(hours=hours)).isoformat(), score, 4, 2, "model", "[]"),
            )
        newest = await exams.score()
        assert newest is not None
        assert (newest.cycle_id, newest.score, newest.taken_at) == (
            "c3",
            0.25,
            (T0 + timedelta(hours=48)).isoformat(),
        )
        after = await exams.score(after=T0)
        assert after is not None and (after.cycle_id, after.score) == ("c2", 0.75)
        assert await exams.score(after=T0 + timedelta(hours=48)) is None
