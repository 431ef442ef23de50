"""Helpers for the memory behaviour tests: a real MemorySystem over a real database file.

`memory_system` builds the memory system alone (with the database and model roles it needs):
these tests are of memory itself. A test that needs memory wired to the rest of the daemon
(its assembler, loop, trunk, turn indexing) builds the daemon's services instead
(`daemon.services.open_services`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model, ModelRequest
from daemon.models.ledger import UsageLedger
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import SchedulerSettings, Settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel

# Tuesday 3 March 2026, 10:00 UTC.
NOW = datetime(2026, 3, 3, 10, 0, tzinfo=UTC)


def settings(**sections: Any) -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"), **sections)


def unexpected(role: str) -> ScriptedModel:
    """A model that fails the test if it is called."""

    def script(request: ModelRequest) -> str:
        raise AssertionError(f"the {role} model was not expected to be called")

    return ScriptedModel(script)


def raising(exc: Exception) -> ScriptedModel:
    def script(request: ModelRequest) -> Reply:
        raise exc

    return ScriptedModel(script)


@asynccontextmanager
async def memory_system(
    root: Path,
    *,
    models: dict[str, Model] | None = None,
    config: Settings | None = None,
    clock: FakeClock | None = None,
    bus: EventBus | None = None,
    topic_addenda: Callable[[str, str], str] | None = None,
    embedder: Embedder | None = None,
    db: Database | None = None,
) -> AsyncIterator[MemorySystem]:
    """The memory system of a home at `root`, on its own SQLite file or on `db` when given."""
    home = Home(root)
    home.ensure()
    cfg = config or settings()
    clk = clock or FakeClock(NOW)
    overrides: dict[str, Model] = {
        role: unexpected(role) for role in ("summariser", "recall_planner", "recall_synthesis")
    }
    overrides.update(models or {})
    async with AsyncExitStack() as stack:
        if db is None:
            db = await stack.enter_async_context(await Database.open(home.db_file))
        async with ModelRoles(cfg, UsageLedger(db, cfg.spend, clk), overrides=overrides) as roles:
            system = MemorySystem(
                home=home,
                db=db,
                settings=cfg,
                roles=roles,
                bus=bus,
                clock=clk,
                topic_addenda=topic_addenda,
                embedder=embedder if embedder is not None else HashEmbedder(),
            )
            async with system:
                yield system


async def add_session(
    db: Database,
    session_id: str,
    messages: list[tuple[str, str]],
    *,
    started: str = "2026-03-02T14:20:00+00:00",
    kind: str = "trunk",
    first_seq: int = 0,
    ts: str | None = None,
) -> None:
    """Insert a session row (once) and its messages, as the trunk or the importer would.

    The messages are stamped `ts` when given, else a minute apart on 2 March 2026."""
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (session_id, kind, f"/home/sessions/trunk/{session_id}.jsonl", started),
    )
    for i, (role, content) in enumerate(messages, first_seq):
        await db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?, ?, ?, ?, ?, ?)",
            (
                session_id,
                f"{session_id}-m{i}",
                i,
                ts or f"2026-03-02T14:{20 + i % 40:02d}:00+00:00",
                role,
                content,
            ),
        )


# A short two-person dialogue in the import format (`memory import`).
DIALOGUE_LINES = [
    {
        "session": "conv-1",
        "id": "D1:1",
        "ts": "2023-05-08T13:56:00",
        "role": "user",
        "speaker": "Caroline",
        "content": "I went to the LGBTQ support group yesterday and it was so powerful.",
    },
    {
        "session": "conv-1",
        "id": "D1:2",
        "ts": "2023-05-08T13:57:00",
        "role": "assistant",
        "speaker": "Melanie",
        "content": "That's wonderful, Caroline! How did it feel?",
    },
    {
        "session": "conv-1",
        "id": "D1:3",
        "ts": "2023-05-08T13:58:00",
        "role": "user",
        "speaker": "Caroline",
        "content": "I'm thinking about a career in counseling after hearing those stories.",
    },
    {
        "session": "conv-2",
        "id": "D2:1",
        "ts": "2023-06-10T10:00:00Z",
        "role": "user",
        "speaker": "Melanie",
        "content": "I painted a sunrise over the lake with my kids last weekend.",
    },
]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    """Write `rows` as one JSON object per line (the import format); return `path`."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
