"""Helpers for the journal tests: the daemon's services on real files, with a scripted heartbeat model."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.agent.session import Session
from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.journal.heartbeat import JournalHeartbeat
from daemon.memory.embedders import NoEmbedder
from daemon.memory.index import MemoryIndex
from daemon.models.base import Model, ModelRequest
from daemon.paths import Home
from daemon.records import parse_records
from daemon.services import open_services
from daemon.settings import JournalSettings, SchedulerSettings, Settings
from daemon.store.db import Database
from daemon.testing import ScriptedModel

# Monday 2 March 2026, 00:00 UTC.
MIDNIGHT = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)


def journal_settings(**journal: Any) -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"), journal=JournalSettings(**journal))


def answering(build: Callable[[ModelRequest], dict[str, Any] | str] | None = None) -> ScriptedModel:
    """A heartbeat model that answers with a JSON entry naming the newest message it was shown."""

    def script(request: ModelRequest) -> str:
        if build is not None:
            out = build(request)
            return out if isinstance(out, str) else json.dumps(out)
        prompt = request.messages[-1].text
        lines = [
            ln
            for ln in prompt.split("<<<TRANSCRIPT", 1)[1].split("TRANSCRIPT>>>")[0].splitlines()
            if ln.strip()
        ]
        asked = [ln for ln in lines if ln.startswith("[user]")] or lines
        return json.dumps(
            {
                "summary": f"Worked on: {asked[-1][:160]}",
                "decisions": ["keep going"],
                "progress": [f"{len(lines)} lines read"],
                "open_questions": [],
                "files_touched": [],
                "tags": ["work"],
            }
        )

    return ScriptedModel(script)


@dataclass
class Rig:
    """One journal under test: its home, database, session, bus, clock and heartbeat model."""

    home: Home
    db: Database
    clock: FakeClock
    bus: EventBus
    journal: JournalHeartbeat
    index: MemoryIndex
    model: ScriptedModel
    sessions: dict[str, Session] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    async def session(self, session_id: str = "trunk-1") -> Session:
        if session_id not in self.sessions:
            self.sessions[session_id] = await Session.open(
                db=self.db,
                directory=self.home.trunk_dir,
                session_id=session_id,
                kind="trunk",
                now=self.clock.now(),
            )
        return self.sessions[session_id]

    async def say(self, user: str, reply: str = "Noted.", *, session_id: str = "trunk-1") -> None:
        """One finished turn in the transcript (what the trunk writes)."""
        session = await self.session(session_id)
        n = next(self._ids)
        ts = self.clock.now().isoformat()
        await session.record(
            *parse_records(
                [
                    {
                        "type": "message",
                        "id": f"m{n}u",
                        "ts": ts,
                        "role": "user",
                        "content": user,
                        "turn_id": f"t{n}",
                    },
                    {
                        "type": "message",
                        "id": f"m{n}a",
                        "ts": ts,
                        "role": "assistant",
                        "content": reply,
                        "turn_id": f"t{n}",
                    },
                    {"type": "turn_end", "turn_id": f"t{n}", "status": "answered", "ts": ts},
                ]
            )
        )

    def lines(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.home.journal_dir.glob("*.jsonl")):
            out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return out


@asynccontextmanager
async def journal_rig(
    root: Path,
    *,
    config: Settings | None = None,
    model: Model | None = None,
    start: datetime = MIDNIGHT,
) -> AsyncIterator[Rig]:
    """The daemon's services (`open_services`), not serving: the journal as the daemon wires it
    (its bus handlers, memory's index), heard through the events a test publishes."""
    home = Home(root)
    home.ensure()
    cfg = config or journal_settings()
    clock = FakeClock(start)
    scripted = model if model is not None else answering()
    async with open_services(
        home,
        cfg,
        clock,
        models={"heartbeat": scripted},
        embedder=NoEmbedder(),
        watch_files=False,
    ) as services:
        yield Rig(
            home=home,
            db=services.db,
            clock=clock,
            bus=services.bus,
            journal=services.journal,
            index=services.memory.index,
            model=scripted,  # type: ignore[arg-type]
        )
