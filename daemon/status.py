"""What `reverie status` reports from the live daemon.

`live_status` answers the `status` socket command inside the daemon; with the daemon down,
`daemon.status_offline` reads the same fields from the home's store (and holds the helpers
both share). Printing them is the CLI's (`daemon.cli.status`). The socket command's request
and result are `StatusRequest` and `StatusResult` (and `ping`'s, `PingRequest` and
`PingResult`): each part of the report is the dict its system describes itself with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self, TypedDict

from daemon.context.handover_record import handover_status
from daemon.models.ledger import UsageLedger
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.store.errors import free_bytes
from daemon.store.postgres import StoreAway


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """`status` takes no arguments (unknown ones are ignored, as everywhere on the wire)."""

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        return cls()


@dataclass(frozen=True, slots=True)
class PingRequest:
    """`ping` takes no arguments."""

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        return cls()


class PingResult(TypedDict):
    pong: bool
    state: str


class StatusResult(TypedDict):
    """`reverie status --json` from the live daemon; `None` where a system is not running
    (or its store read waits on an away PostgreSQL server)."""

    running: bool
    state: str
    state_since: str
    phase: str | None
    home: str
    store: str
    store_away: dict[str, Any] | None
    trunk: dict[str, Any]
    context: dict[str, Any]
    forks: dict[str, Any] | None
    mcp: list[dict[str, Any]]
    web: dict[str, Any] | None
    matrix: dict[str, Any] | None
    next_sleep: str | None
    sleep: dict[str, Any] | None
    self_exam: dict[str, Any] | None
    handover: dict[str, Any] | None
    next_heartbeat: str | None
    last_heartbeat: str | None
    last_heartbeat_result: str | None
    jobs: dict[str, dict[str, Any]]
    journal: dict[str, Any] | None
    spend: dict[str, Any] | None
    schedules: dict[str, Any] | None
    started_at: str
    resources: dict[str, Any]
    vector_search: bool
    embedder: str | None


async def _unless_away(read: Any, default: Any = None) -> Any:
    """A store read for status, or `default` while the PostgreSQL server is away."""
    try:
        return await read
    except StoreAway:
        return default


def _store_line(db: Database, away: dict[str, Any] | None) -> str:
    if away is None:
        return db.describe
    since = datetime.fromisoformat(away["since"])
    queued = away["queued_writes"]
    return (
        f"{db.describe} — AWAY since {since:%Y-%m-%d %H:%M:%S %Z} "
        f"({queued} write{'s' if queued != 1 else ''} queued in the home)"
    )


async def _spend(db: Database, settings: Settings) -> dict[str, Any]:
    from daemon.status_offline import spend_json

    today = await UsageLedger(db, settings.spend).today()
    return spend_json(today, settings.spend.daily_cap_usd)


async def live_status(daemon: Any) -> StatusResult:
    """Status from inside the running daemon.

    What only a report reads (the offline status's helpers, the self-exam's record) is
    imported by the first `status` asked, not by the daemon's start.
    """
    from daemon.sleep.exam_record import exam_status
    from daemon.status_offline import iso, last_ok_run

    db: Database = daemon.db
    trunk = daemon.trunk
    settings: Settings = daemon.settings
    away = db.outage()
    sched = daemon.scheduler
    jobs = sched.describe() if sched else {}
    heartbeat = jobs.get("heartbeat")
    journal = daemon.journal.describe() if getattr(daemon, "journal", None) is not None else None
    embedder = daemon.memory.embedder if daemon.memory is not None else None
    life = daemon.lifecycle.snapshot()
    return {
        "running": True,
        "state": life["state"],
        "state_since": life["since"],
        "phase": life["phase"],
        "home": str(daemon.home.root),
        "store": _store_line(db, away),
        # The PostgreSQL server away (the store fails fast, writes are queued): since, why,
        # probes so far, the current probe interval, queued writes. None while it answers.
        "store_away": away,
        "trunk": _trunk_status(daemon),
        "context": await _context_status(daemon),
        "forks": (
            await _unless_away(daemon.delegator.status()) if daemon.delegator is not None else None
        ),
        # The MCP servers: name, transport, state, tool count, restarts, last error.
        "mcp": [server.as_dict() for server in daemon.mcp.status()]
        if getattr(daemon, "mcp", None) is not None
        else [],
        # The web console: listening (its URL), failed (why), open pages, requests served.
        "web": daemon.web.describe() if getattr(daemon, "web", None) is not None else None,
        # The Matrix channel: connected, away (with its backoff), refused (why); its counts.
        "matrix": daemon.matrix.describe() if getattr(daemon, "matrix", None) is not None else None,
        "next_sleep": iso(sched.next_run("nightly_sleep")) if sched else None,
        "sleep": (
            await _unless_away(daemon.sleep_cycle.describe())
            if daemon.sleep_cycle is not None
            else None
        ),
        # The continuity self-exam after the last wake: score, the one before, the trend, misses.
        "self_exam": await _unless_away(exam_status(db)),
        # The trunk's last model handover (from, to, when; the letter pending or delivered).
        "handover": await _unless_away(handover_status(db)),
        # A heartbeat is reported only where a job keeps a record on it (the journal).
        "next_heartbeat": heartbeat["next_run"] if heartbeat else None,
        # Only a run that finished its check counts as a heartbeat (a failed one does not).
        "last_heartbeat": (journal or {}).get("last_check") or last_ok_run(heartbeat),
        "last_heartbeat_result": heartbeat["last_result"] if heartbeat else None,
        "jobs": jobs,
        "journal": journal,
        "spend": await _unless_away(_spend(db, settings)),
        "schedules": (
            await _unless_away(daemon.keeper.describe())
            if getattr(daemon, "keeper", None)
            else None
        ),
        "started_at": daemon.started_at.isoformat(),
        # RSS, open fds, children, database and WAL size: now, after start, after the last
        # sleep, and what drifted. Children are expected only from MCP servers while idle.
        "resources": daemon.resources.describe(
            expected_children=None
            if (trunk and trunk.busy)
            or (daemon.delegator is not None and daemon.delegator.running > 0)
            else len(daemon.mcp.status())
        ),
        # Vector search needs both an embedder that makes vectors and somewhere to search them.
        "vector_search": bool(embedder is not None and embedder.dim > 0),
        "embedder": embedder.name if embedder is not None else None,
    }


def _trunk_status(daemon: Any) -> dict[str, Any]:
    """The trunk: its session, whether it works or waits (the model or the disk away), its model."""
    trunk = daemon.trunk
    return {
        "session_id": trunk.session.id if trunk and trunk.session else None,
        "messages": trunk.session.message_count() if trunk and trunk.session else 0,
        "busy": bool(trunk and trunk.busy),
        "held": bool(trunk and trunk.held),
        "current_turn": trunk.current_turn if trunk else None,
        "queued": len(trunk.inbox.pending()) if trunk else 0,
        "waiting_for_model": (
            trunk.waiting_for_model.describe(queued=len(trunk.inbox.pending()))
            if trunk and trunk.waiting_for_model
            else None
        ),
        "storage_down": (
            trunk.storage_down.describe(
                queued=len(trunk.inbox.pending()), free=free_bytes(daemon.home.root)
            )
            if trunk and trunk.storage_down
            else None
        ),
        "provider": daemon.roles.provider_kind("trunk") if daemon.roles else None,
        "model": daemon.roles.model_name("trunk") if daemon.roles else None,
    }


async def _context_status(daemon: Any) -> dict[str, Any]:
    """The context window's use now, and the last turn's report (in this session)."""
    from daemon.status_offline import last_turn

    db: Database = daemon.db
    trunk = daemon.trunk
    settings: Settings = daemon.settings
    last = await _unless_away(last_turn(db))
    window = settings.models.trunk.context_window
    current = trunk.session.id if trunk and trunk.session else None
    if last is not None and last.get("session_id") != current:
        # The last turn was in a session since switched away from (sleep, `switch`): the fresh
        # session has replayed nothing yet, and the old turn's report describes the old one.
        used, last = 0, None
    else:
        used = (
            trunk.last_result.context_tokens
            if trunk and trunk.last_result
            else (last or {}).get("context_tokens", 0)
        )
    return {
        "used_tokens": used,
        "window_tokens": window,
        "fraction": round(used / window, 4) if window else 0,
        "compaction_threshold": settings.agent.compaction_threshold,
        "last_turn": last,
    }
