"""Helpers for the sleep phase tests: the daemon's services (real home, database, memory, roles).

`sleep_home` yields a `SleepRig` whose `context()` builds the `PhaseContext` a cycle would
give a phase, on a `FakeClock` that the test moves across weeks and months.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.memory.embedders import HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model
from daemon.models.offline import OfflineModel
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.services import open_services
from daemon.settings import SchedulerSettings, Settings, SleepSettings
from daemon.sleep.phases import PhaseContext
from daemon.store.db import Database

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
_cycles = itertools.count(1)


def sleep_settings(**sleep: Any) -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"), sleep=SleepSettings(**sleep))


@dataclass
class SleepRig:
    home: Home
    db: Database
    settings: Settings
    clock: FakeClock
    roles: ModelRoles
    memory: MemorySystem
    bus: EventBus

    def context(
        self, *, since: datetime | None = None, cycle_id: str | None = None
    ) -> PhaseContext:
        return PhaseContext(
            cycle_id=cycle_id or f"cycle-{next(_cycles)}",
            reason="manual",
            session_id="trunk-test",
            started_at=self.clock.now(),
            since=since,
            home=self.home,
            settings=self.settings,
            db=self.db,
            models=self.roles,
            bus=self.bus,
            clock=self.clock,
            memory=self.memory,
        )

    async def add_session(
        self,
        session_id: str,
        messages: list[tuple[str, str]],
        *,
        started: datetime,
        kind: str = "trunk",
        summarise: bool = True,
    ) -> None:
        """Record a session and its messages as the trunk (or importer) would; chunk and summarise it."""
        await self.db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (
                session_id,
                kind,
                str(self.home.trunk_dir / f"{session_id}.jsonl"),
                started.isoformat(),
            ),
        )
        for i, (role, content) in enumerate(messages):
            await self.db.execute(
                "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    f"{session_id}-m{i}",
                    i,
                    (started + timedelta(minutes=i)).isoformat(),
                    role,
                    content,
                ),
            )
        await self.memory.index_session(session_id)
        if summarise:
            assert await self.memory.summarise_session(session_id, wait=True) is not None


@asynccontextmanager
async def sleep_home(
    root: Path,
    *,
    settings: Settings | None = None,
    models: dict[str, Model] | None = None,
    start: datetime = START,
) -> AsyncIterator[SleepRig]:
    """The daemon's services (`open_services`), not serving: a test runs a phase itself, with
    the context the daemon's sleep cycle would give it (its bus, memory and model roles)."""
    home = Home(root)
    home.ensure()
    cfg = settings or sleep_settings()
    clock = FakeClock(start)
    offline = OfflineModel()
    overrides: dict[str, Model] = {"summariser": offline, "dreams": offline}
    overrides.update(models or {})
    async with open_services(
        home, cfg, clock, models=overrides, embedder=HashEmbedder(), watch_files=False
    ) as services:
        yield SleepRig(
            home=home,
            db=services.db,
            settings=cfg,
            clock=clock,
            roles=services.roles,
            memory=services.memory,
            bus=services.bus,
        )
