"""The Now page: state and phase, a timeline of the last days, spend today and per day.

The timeline's bands come from what the daemon records. The run log (`daemon.run_log`) says
when it was running: time no run covers is `off`, and the days of a home that ran before the
run log existed are `unknown`. Within a run, a sleep cycle up to the end of its wind-down
phase is the winding-down band, the rest of the cycle the asleep band, everything else
awake. The live state closes the last band, so a wind-down that has begun but not yet started
a cycle (the context filling up) shows as one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from daemon.memory.rows import parse_iso
from daemon.sleep.cycle import WIND_DOWN
from daemon.store.console import ConsoleQueries

if TYPE_CHECKING:
    from daemon.models.ledger import DaySpend
    from daemon.services import Services

# How far past now the timeline reaches, so the next scheduled items show on it.
AHEAD = timedelta(hours=12)


@dataclass(frozen=True, kw_only=True)
class Band:
    state: str  # awake | winding-down | asleep | off | unknown
    start: datetime
    end: datetime
    note: str = ""  # said on hover (how a run ended)
    open: bool = False  # its end is not on record (a cycle not finished): drawn up to now


@dataclass(frozen=True, kw_only=True)
class Mark:
    """A point or a span on the timeline: a turn, a fork, a scheduled item, a sleep cycle."""

    kind: str  # turn | fork | schedule | sleep
    at: datetime
    end: datetime | None = None
    label: str = ""
    ref: str = ""  # what a click opens (a turn id, a cycle id)


@dataclass(frozen=True, kw_only=True)
class Timeline:
    start: datetime
    now: datetime
    end: datetime
    bands: list[Band]
    marks: list[Mark]


def _when(value: str) -> datetime:
    """A time the store always records (a row's start)."""
    at = parse_iso(value)
    if at is None:
        raise ValueError(f"a stored time is empty: {value!r}")
    return at


async def _sleep_spans(services: Services, start: datetime, now: datetime) -> list[Band]:
    """Winding-down and asleep spans of the cycles that overlap [start, now]."""
    rows = await ConsoleQueries(services.db).sleep_spans(
        wind_down=WIND_DOWN, since=start.isoformat()
    )
    spans: list[Band] = []
    for row in rows:
        began, finished, wd_end = row.started_at, row.finished_at, row.wind_down_end
        cycle_start = parse_iso(began) or now
        cycle_end = parse_iso(finished) or now
        calm_from = parse_iso(wd_end) or (cycle_end if finished else now)
        # The daemon winds down from the cycle's start (the turn in progress finishes first).
        spans.append(
            Band(
                state="winding-down",
                start=cycle_start,
                end=calm_from,
                open=not (wd_end or finished),
            )
        )
        if calm_from < cycle_end:
            spans.append(Band(state="asleep", start=calm_from, end=cycle_end, open=not finished))
    return spans


def fill_bands(spans: list[Band], start: datetime, now: datetime, live: Band | None) -> list[Band]:
    """Fill the gaps between recorded spans with awake; clip everything to [start, now]."""
    if live is not None and not any(s.end >= now and s.state == live.state for s in spans):
        spans = [*spans, live]
    out: list[Band] = []
    cursor = start
    for span in sorted(spans, key=lambda s: s.start):
        s, e = max(span.start, cursor), min(span.end, now)
        if e <= s:
            continue
        if s > cursor:
            out.append(Band(state="awake", start=cursor, end=s))
        out.append(Band(state=span.state, start=s, end=e))
        cursor = e
    if cursor < now:
        out.append(Band(state="awake", start=cursor, end=now))
    return out


def run_bands(
    runs: list[Band], sleep: list[Band], start: datetime, now: datetime, live: Band | None
) -> list[Band]:
    """The state over [start, now]: `off` where no run covers it, `unknown` where the run log
    has no record, and within each run its awake, winding-down and asleep bands.

    `runs` are spans with state `running` or `unknown` (a lost run's `note` goes on its last
    band); `live` is the live state, for the run that reaches now.
    """
    out: list[Band] = []
    cursor = start
    for run in sorted(runs, key=lambda r: r.start):
        s, e = max(run.start, cursor), min(run.end, now)
        if e <= s:
            continue
        if s > cursor:
            out.append(Band(state="off", start=cursor, end=s))
        if run.state == "unknown":
            inside = [Band(state="unknown", start=s, end=e, note=run.note)]
        else:
            # A cycle shows in the run it began in, and in the run that finished it (a cycle
            # a kill interrupted is resumed at the next start); one never finished is not
            # carried into later runs (the live state says what this run is doing).
            own = [
                b
                for b in sleep
                if run.start <= b.start < run.end or (not b.open and run.start < b.end <= run.end)
            ]
            inside = fill_bands(own, s, e, live if e >= now else None)
            if run.note and inside:
                inside[-1] = replace(inside[-1], note=run.note)
        out += inside
        cursor = e
    if cursor < now:
        out.append(Band(state="off", start=cursor, end=now))
    return out


async def _runs(services: Services, start: datetime, now: datetime) -> list[Band]:
    """The daemon's runs reaching into [start, now] as spans (this one up to now)."""
    log = services.runs
    spans = []
    for run in await log.runs(start):
        if run.ended == "unrecorded":
            spans.append(
                Band(
                    state="unknown",
                    start=run.started_at,
                    end=run.until,
                    note="no record: the daemon kept no run log yet",
                )
            )
        elif run.id == log.current or run.ended is None:
            spans.append(Band(state="running", start=run.started_at, end=now))
        else:
            note = (
                f"stopped without a clean stop (killed or crashed); last seen {run.until:%Y-%m-%d %H:%M}"
                if run.ended == "lost"
                else ""
            )
            spans.append(Band(state="running", start=run.started_at, end=run.until, note=note))
    if log.current is None:  # this run's start could not be recorded: it runs all the same
        spans.append(Band(state="running", start=services.started_at, end=now))
    return spans


async def timeline(services: Services, *, days: int = 3) -> Timeline:
    """The last `days` days up to now (and a little after, for what is scheduled)."""
    now = services.clock.now()
    start, end = now - timedelta(days=days), now + AHEAD
    life = services.lifecycle
    live = (
        Band(state=life.state.value, start=life.since, end=now)
        if life.state.value in ("winding-down", "asleep")
        else None
    )
    bands = run_bands(
        await _runs(services, start, now),
        await _sleep_spans(services, start, now),
        start,
        now,
        live,
    )
    since = start.isoformat()
    queries = ConsoleQueries(services.db)
    marks: list[Mark] = []
    for turn in await queries.turns_since(since):
        marks.append(
            Mark(
                kind="turn",
                at=_when(turn.ts),
                label=f"{turn.turn_id} · {turn.context_tokens:,} tokens",
                ref=turn.turn_id,
            )
        )
    for fork in await queries.forks_reaching(since):
        marks.append(
            Mark(
                kind="fork",
                at=_when(fork.started_at),
                end=parse_iso(fork.ended_at) or now,
                label=f"{fork.id} ({fork.status})",
                ref=fork.parent_turn_id,
            )
        )
    for cycle in await queries.cycles_since(since):
        marks.append(
            Mark(
                kind="sleep",
                at=_when(cycle.started_at),
                end=parse_iso(cycle.finished_at) or now,
                label=f"{cycle.id} ({cycle.reason})",
                ref=cycle.id,
            )
        )
    for fire in await queries.fires_since(since):
        marks.append(
            Mark(
                kind="schedule",
                at=_when(fire.due_at),
                label=f"{fire.schedule_id} fired ({fire.status})",
            )
        )
    for item in await services.schedules.upcoming(limit=20):
        if item.next_due is not None and item.next_due <= end:
            marks.append(
                Mark(kind="schedule", at=item.next_due, label=f"{item.kind} due: {item.text[:60]}")
            )
    return Timeline(start=start, now=now, end=end, bands=bands, marks=marks)


async def spend_per_day(services: Services, *, days: int) -> list[DaySpend]:
    """Spend per local day over the last `days` days, today included (the usage ledger)."""
    since = (services.clock.now() - timedelta(days=days - 1)).astimezone().date().isoformat()
    return await services.ledger.days(since)


async def spend(services: Services, *, days: int = 14) -> dict[str, Any]:
    """Spend today against the cap, and per day over the last `days` days."""
    return {
        "today": await services.ledger.today(),
        "cap_usd": services.settings.spend.daily_cap_usd,
        "days": await spend_per_day(services, days=days),
    }


def state(services: Services) -> dict[str, Any]:
    """The lifecycle's state, since when, and the sleep phase (when asleep)."""
    snap = services.lifecycle.snapshot()
    trunk = services.trunk
    return {
        **snap,
        "session_id": trunk.session.id if trunk.session else None,
        "busy": trunk.busy,
        "current_turn": trunk.current_turn,
        "queued": len(trunk.inbox.pending()),
    }
