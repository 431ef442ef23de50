"""What `reverie status` reports with the daemon down: the home's store, read without the daemon.

A command imports what it runs: this module reads the store through its repositories and the
journal's day files, and the few settings it shows through `StatusSettings` — read from the
configuration's layers with the standard library when they set nothing else, so a cold
status loads neither pydantic nor the sleep cycle, the models or numpy
(`tests/test_cli_cold.py` counts the modules). `daemon.status` builds the same fields from
inside a running daemon and shares the helpers here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.clock import local_zone, next_time_of_day
from daemon.config_sources import server_url_problem
from daemon.context.handover_record import handover_status
from daemon.journal.entries import JournalStore
from daemon.sleep.checkpoints import cycle_json
from daemon.sleep.exam_record import exam_status
from daemon.store.console import ConsoleQueries
from daemon.store.db import Database
from daemon.store.job_state import JobStateRepo
from daemon.store.kv import KvRepo
from daemon.store.sessions import SessionsRepo
from daemon.store.sleep_cycles import SleepCyclesRepo
from daemon.store.usage import DaySpend, UsageRepo

if TYPE_CHECKING:
    from daemon.paths import Home
    from daemon.settings import Settings


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _count(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _zone(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        local_zone(value)
    except ValueError:
        return False
    return True


# The keys a configuration may set for `StatusSettings.read` to vouch for it, each with the
# check `daemon.settings` makes of it (tests/test_cli_cold.py holds the two together). The
# status reads the first group; the second holds the scalars the environment sets
# (`REVERIE_*`), checked but not read. A configuration setting any other key is validated
# whole, by `daemon.settings`, before status reads it.
CHECKS: dict[tuple[str, ...], Callable[[Any], bool]] = {
    ("agent", "name"): _text,
    ("storage", "url"): lambda v: isinstance(v, str) and not (v and server_url_problem(v)),
    ("storage", "namespace"): _text,
    ("storage", "index_build_memory"): lambda v: (
        isinstance(v, str) and re.fullmatch(r"\d+\s*(kB|MB|GB|TB)", v.strip()) is not None
    ),
    ("store", "busy_timeout_ms"): _count(0),
    ("chat", "socket"): _text,
    ("spend", "daily_cap_usd"): _amount,
    ("models", "trunk", "context_window"): _count(1024),
    ("scheduler", "nightly_sleep"): lambda v: (
        isinstance(v, str) and re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", v) is not None
    ),
    ("scheduler", "timezone"): _zone,
    ("sleep", "nightly"): lambda v: isinstance(v, bool),
    ("log", "level"): _one_of("debug", "info", "warning", "error"),
    ("log", "format"): _one_of("auto", "json", "console"),
    ("models", "trunk", "provider"): _one_of("auto", "anthropic", "openai", "offline"),
    ("models", "trunk", "model"): _text,
    ("providers", "anthropic", "base_url"): _text,
    ("memory", "embedder"): _one_of("auto", "none", "minilm", "e5", "local", "api", "hash"),
}


def _leaves(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for key, value in data.items():
        path = (*prefix, str(key))
        if isinstance(value, dict):
            out.update(_leaves(value, path))
        else:
            out[path] = value
    return out


@dataclass(frozen=True, kw_only=True)
class StatusSettings:
    """The settings a status read from the store needs (defaults as `daemon.settings` has them)."""

    storage_url: str = ""
    namespace: str = "Reverie"  # [storage] namespace, else [agent] name
    index_build_memory: str = "2GB"
    busy_timeout_ms: int = 5000
    socket: str | None = None
    daily_cap_usd: float = 10.0
    context_window: int = 200_000
    nightly: bool = True
    nightly_sleep: str = "03:30"
    timezone: str | None = None

    @classmethod
    def of(cls, settings: Settings) -> StatusSettings:
        """From validated settings."""
        return cls(
            storage_url=settings.storage.url,
            namespace=settings.storage.namespace or settings.agent.name,
            index_build_memory=settings.storage.index_build_memory,
            busy_timeout_ms=settings.store.busy_timeout_ms,
            socket=settings.chat.socket,
            daily_cap_usd=settings.spend.daily_cap_usd,
            context_window=settings.models.trunk.context_window,
            nightly=settings.sleep.nightly,
            nightly_sleep=settings.scheduler.nightly_sleep,
            timezone=settings.scheduler.timezone,
        )

    @classmethod
    def read(cls, data: dict[str, Any]) -> StatusSettings | None:
        """From the merged configuration layers (`config_sources.read_layers`), or None when
        they set a key outside `CHECKS` or a value its check refuses: `daemon.settings` must
        then validate them (and names the problem in its own words)."""
        leaves = _leaves(data)
        for path, value in leaves.items():
            check = CHECKS.get(path)
            if check is None or not check(value):
                return None
        base = cls()

        def get(*path: str, default: Any) -> Any:
            return leaves.get(path, default)

        agent = get("agent", "name", default=base.namespace)
        return cls(
            storage_url=get("storage", "url", default=base.storage_url),
            namespace=get("storage", "namespace", default="") or agent,
            index_build_memory=get(
                "storage", "index_build_memory", default=base.index_build_memory
            ).strip(),
            busy_timeout_ms=get("store", "busy_timeout_ms", default=base.busy_timeout_ms),
            socket=get("chat", "socket", default=base.socket),
            daily_cap_usd=float(get("spend", "daily_cap_usd", default=base.daily_cap_usd)),
            context_window=get("models", "trunk", "context_window", default=base.context_window),
            nightly=get("sleep", "nightly", default=base.nightly),
            nightly_sleep=get("scheduler", "nightly_sleep", default=base.nightly_sleep),
            timezone=get("scheduler", "timezone", default=base.timezone),
        )


# -- the fields, shared with the live status ----------------------------------------------


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def last_ok_run(job: dict[str, Any] | None) -> str | None:
    """A job's last run when it finished its work (a failed run is no heartbeat)."""
    if not job or job.get("last_status") != "ok":
        return None
    last: str | None = job.get("last_run")
    return last


async def last_turn(db: Database) -> dict[str, Any] | None:
    """The last turn's context report: its session, its system tokens per layer."""
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


def spend_json(today: DaySpend, cap_usd: float) -> dict[str, Any]:
    """Today's spend against the daily cap."""
    return {
        "day": today.day,
        "cost_usd": round(today.cost_usd, 4),
        "cap_usd": cap_usd,
        "calls": today.calls,
        "cache_hit_rate": round(today.cache_hit_rate, 4),
        "input_tokens": today.input_tokens,
        "output_tokens": today.output_tokens,
        "cache_read_tokens": today.cache_read_tokens,
    }


async def persisted_jobs(db: Database) -> dict[str, dict[str, Any]]:
    """The scheduler's jobs as they were last persisted."""
    return {
        s.job: {
            "last_run": s.last_run,
            "last_status": s.last_status,
            "last_result": s.last_result,
            "next_run": s.next_run,
            "runs": s.runs,
        }
        for s in await JobStateRepo(db).all()
    }


# -- the status of a stopped daemon -------------------------------------------------------


async def _last_sleep(db: Database) -> dict[str, Any] | None:
    try:
        cycles = await SleepCyclesRepo(db).cycles(limit=1)
    except Exception:  # a database from before the sleep cycle kept checkpoints
        return None
    if not cycles:
        return {"last": None}
    return {"last": cycle_json(cycles[0]), "status": cycles[0].status}


async def _schedules(db: Database, zone: Any) -> dict[str, Any] | None:
    from daemon.schedule.store import schedule_status
    from daemon.store.schedules import SchedulesRepo

    try:
        return await schedule_status(SchedulesRepo(db), zone)
    except Exception:  # a database from before schedules were kept
        return None


def _next_sleep(jobs: dict[str, dict[str, Any]], view: StatusSettings) -> str | None:
    """The nightly run the scheduler persisted, else the next one by the settings (no jitter)."""
    persisted = (jobs.get("nightly_sleep") or {}).get("next_run")
    now = datetime.now(UTC)
    if persisted and datetime.fromisoformat(persisted) > now:
        return str(persisted)
    if not view.nightly:
        return None
    return iso(next_time_of_day(view.nightly_sleep, local_zone(view.timezone), now))


async def offline_status(home: Home, view: StatusSettings) -> dict[str, Any]:
    """Status read from the store when the daemon is not running."""
    out: dict[str, Any] = {"running": False, "state": "stopped", "home": str(home.root)}
    if not view.storage_url and not home.db_file.exists():
        out["note"] = "no database yet: the daemon has never run in this home"
        return out
    zone = local_zone(view.timezone)
    db = await Database.open(
        home.db_file,
        readonly=True,
        busy_timeout_ms=view.busy_timeout_ms,
        url=view.storage_url or None,
        namespace=view.namespace,
        build_memory=view.index_build_memory,
    )
    async with db:
        out["store"] = db.describe
        session_id = await KvRepo(db).get_json("trunk_session")
        count = await SessionsRepo(db).message_count(session_id) if session_id else 0
        out["trunk"] = {"session_id": session_id, "messages": count}
        out["context"] = {"last_turn": await last_turn(db), "window_tokens": view.context_window}
        # The ledger's day is the machine's local date (`daemon.models.ledger`).
        day = datetime.now().astimezone().date().isoformat()
        out["spend"] = spend_json(await UsageRepo(db).day(day), view.daily_cap_usd)
        try:
            out["jobs"] = await persisted_jobs(db)
        except Exception:  # a database from before the scheduler kept state
            out["jobs"] = {}
        out["next_sleep"] = _next_sleep(out["jobs"], view)
        out["sleep"] = await _last_sleep(db)
        out["self_exam"] = await exam_status(db)
        out["handover"] = await handover_status(db)
        out["schedules"] = await _schedules(db, zone)
    heartbeat = out["jobs"].get("heartbeat")
    out["last_heartbeat"] = last_ok_run(heartbeat)
    out["last_heartbeat_result"] = heartbeat.get("last_result") if heartbeat else None
    newest = JournalStore(home.journal_dir, zone).last()
    out["journal"] = {
        "last_entry": newest.ts.isoformat() if newest else None,
        "last_entry_summary": newest.summary[:160] if newest else None,
    }
    return out
