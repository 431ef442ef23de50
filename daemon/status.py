"""What `reverie status` reports, from the live daemon or, when it is down, from the store.

`live_status` answers the `status` socket command inside the daemon; `offline_status` reads the
same fields from the home's database when no daemon runs. Printing them is the CLI's
(`daemon.cli.status`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from daemon.context.handover import handover_status
from daemon.journal.entries import JournalStore
from daemon.models.ledger import UsageLedger
from daemon.paths import Home
from daemon.scheduler import local_zone, persisted_jobs
from daemon.settings import Settings
from daemon.sleep.cycle import planned_nightly, sleep_status
from daemon.sleep.exam_record import exam_status
from daemon.store.console import ConsoleQueries
from daemon.store.db import Database
from daemon.store.errors import free_bytes
from daemon.store.kv import KvRepo
from daemon.store.postgres import StoreAway
from daemon.store.sessions import SessionsRepo


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


async def _last_turn(db: Database) -> dict[str, Any] | None:
    row = await ConsoleQueries(db).last_turn_report()
    if row is None:
        return None
    try:
        report = json.loads(row.report)
    except json.JSONDecodeError:
        report = {}
    layers = report.get("layers") if isinstance(report, dict) else None
    per_layer: dict[str, int] = {}
    if isinstance(layers, list):
        for layer in layers:
            if isinstance(layer, dict) and "name" in layer:
                per_layer[str(layer["name"])] = int(layer.get("tokens", 0))
    return {
        "turn_id": row.turn_id,
        "session_id": row.session_id,
        "ts": row.ts,
        "context_tokens": row.context_tokens,
        "layers": per_layer,
    }


async def _spend(db: Database, settings: Settings) -> dict[str, Any]:
    today = await UsageLedger(db, settings.spend).today()
    return {
        "day": today.day,
        "cost_usd": round(today.cost_usd, 4),
        "cap_usd": settings.spend.daily_cap_usd,
        "calls": today.calls,
        "cache_hit_rate": round(today.cache_hit_rate, 4),
        "input_tokens": today.input_tokens,
        "output_tokens": today.output_tokens,
        "cache_read_tokens": today.cache_read_tokens,
    }


async def _schedules(db: Database, settings: Settings) -> dict[str, Any]:
    from daemon.clock import SystemClock
    from daemon.schedule.store import ScheduleStore, schedule_status

    store = ScheduleStore(
        db,
        clock=SystemClock(),
        zone=local_zone(settings.scheduler.timezone),
        settings=settings.schedule,
    )
    return await schedule_status(store)


def _last_ok_run(job: dict[str, Any] | None) -> str | None:
    if not job or job.get("last_status") != "ok":
        return None
    last: str | None = job.get("last_run")
    return last


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


async def live_status(daemon: Any) -> dict[str, Any]:
    """Status from inside the running daemon."""
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
        "next_sleep": _iso(sched.next_run("nightly_sleep")) if sched else None,
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
        "last_heartbeat": (journal or {}).get("last_check") or _last_ok_run(heartbeat),
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
    db: Database = daemon.db
    trunk = daemon.trunk
    settings: Settings = daemon.settings
    last = await _unless_away(_last_turn(db))
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


async def offline_status(home: Home, settings: Settings) -> dict[str, Any]:
    """Status read from the store when the daemon is not running."""
    out: dict[str, Any] = {"running": False, "state": "stopped", "home": str(home.root)}
    if not settings.storage.url and not home.db_file.exists():
        out["note"] = "no database yet: the daemon has never run in this home"
        return out
    async with await Database.open_configured(home.db_file, settings, readonly=True) as db:
        out["store"] = db.describe
        session_id = await KvRepo(db).get_json("trunk_session")
        count = await SessionsRepo(db).message_count(session_id) if session_id else 0
        out["trunk"] = {"session_id": session_id, "messages": count}
        last = await _last_turn(db)
        out["context"] = {"last_turn": last, "window_tokens": settings.models.trunk.context_window}
        out["spend"] = await _spend(db, settings)
        try:
            out["jobs"] = await persisted_jobs(db)
        except Exception:  # a database from before the scheduler kept state
            out["jobs"] = {}
        persisted = (out["jobs"].get("nightly_sleep") or {}).get("next_run")
        now = datetime.now(UTC)
        if persisted and datetime.fromisoformat(persisted) > now:
            out["next_sleep"] = persisted
        else:
            out["next_sleep"] = _iso(planned_nightly(settings, now))
        try:
            out["sleep"] = await sleep_status(db)
        except Exception:  # a database from before the sleep cycle kept checkpoints
            out["sleep"] = None
        out["self_exam"] = await exam_status(db)
        out["handover"] = await handover_status(db)
        try:
            out["schedules"] = await _schedules(db, settings)
        except Exception:  # a database from before schedules were kept
            out["schedules"] = None
    heartbeat = out["jobs"].get("heartbeat")
    out["last_heartbeat"] = _last_ok_run(heartbeat)
    out["last_heartbeat_result"] = heartbeat.get("last_result") if heartbeat else None
    newest = JournalStore(home.journal_dir, local_zone(settings.scheduler.timezone)).last()
    out["journal"] = {
        "last_entry": newest.ts.isoformat() if newest else None,
        "last_entry_summary": newest.summary[:160] if newest else None,
    }
    return out
