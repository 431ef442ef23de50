"""Nightly maintenance on PostgreSQL stops between steps once its lock is another daemon's."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from daemon.events import SleepHousekeeping
from daemon.settings import SchedulerSettings, Settings, SleepSettings, StorageSettings
from daemon.sleep.maintenance import MaintenancePhase
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.sleep_phase_support import sleep_home

pytestmark = pytest.mark.anyio


async def test_maintenance_stops_once_a_reconnect_finds_its_lock_taken(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    settings = Settings(
        scheduler=SchedulerSettings(timezone="UTC"),
        sleep=SleepSettings(),
        storage=StorageSettings(url=pg_url),
    )
    async with sleep_home(tmp_path / "home", settings=settings) as rig:
        key = f"reverie.{rig.db.schema}.maintenance"
        rival = psycopg.connect(pg_url, autocommit=True)
        try:
            # Mid-phase (its housekeeping hook): the daemon's session is cut, and another
            # daemon takes the namespace's maintenance before this one reconnects.
            cuts: list[int] = []

            async def cut_and_take(event: SleepHousekeeping) -> None:
                if cuts:
                    return  # once
                [pid] = await rig.db.fetchone("SELECT pg_backend_pid()")
                rival.execute("SELECT pg_terminate_backend(%s)", (pid,))
                rival.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
                cuts.append(pid)

            rig.bus.on(SleepHousekeeping, cut_and_take, name="test.rival")
            report = await MaintenancePhase().run(rig.context())
            assert report.details.get("stopped") == "maintenance lock lost", report.changed
            assert report.details["after"] == "housekeeping"
            assert "another daemon had taken" in report.changed
            # The rival's lock was left alone: it is still the rival's.
            [[held]] = rival.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
                (rival.info.backend_pid,),
            ).fetchall()
            assert held == 1
            # Once the rival is done, the next cycle runs the whole phase.
            rival.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
            again = await MaintenancePhase().run(rig.context())
            assert "stopped" not in again.details and "skipped" not in again.details
        finally:
            rival.close()
