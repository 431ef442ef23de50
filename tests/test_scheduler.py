"""The scheduler runs jobs on the event loop, isolates failures, reports next runs."""

from __future__ import annotations

import anyio
import pytest

from daemon.scheduler import Scheduler, parse_hhmm

pytestmark = pytest.mark.anyio


async def test_interval_jobs_run_and_failures_are_isolated() -> None:
    runs: list[str] = []
    done = anyio.Event()

    async def good() -> str:
        runs.append("good")
        if runs.count("good") >= 2:
            done.set()
        return "ok"

    async def bad() -> None:
        runs.append("bad")
        raise RuntimeError("job bug")

    async with Scheduler() as s:
        s.add_interval("good", good, seconds=0.05)
        s.add_interval("bad", bad, seconds=0.05)
        assert set(s.jobs()) == {"good", "bad"}
        with anyio.fail_after(5):
            await done.wait()
        assert "bad" in runs
        assert s.last_run["good"] is not None
        assert s.next_run("good") is not None


async def test_daily_job_next_run_is_at_the_given_time() -> None:
    async def job() -> None:
        return None

    async with Scheduler(timezone="UTC") as s:
        s.add_daily("nightly", job, at="03:30")
        nxt = s.next_run("nightly")
        assert nxt is not None and (nxt.hour, nxt.minute) == (3, 30)
        assert s.next_run("missing") is None


def test_parse_hhmm_rejects_nonsense() -> None:
    assert parse_hhmm("07:05") == (7, 5)
    for bad in ("7", "24:00", "12:60", "ab:cd"):
        with pytest.raises(ValueError):
            parse_hhmm(bad)
