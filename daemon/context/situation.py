"""The prompt's layers about the turn's situation: the clock line, the time away, a model
handover, the open threads.

They change from turn to turn (after the cache breakpoint). A memory read that fails leaves
its layer out with a note; the store's server being away is recorded as a skipped read; a
cancellation always propagates. A fork works from its brief: no handover letter, no threads.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio

from daemon.clock import Clock
from daemon.context.handover import HEADING as HANDOVER_HEADING
from daemon.context.handover import HandoverDesk
from daemon.context.layers import Entry, Layer, memory_block
from daemon.context.threads import HEADING as THREADS_HEADING
from daemon.context.threads import ThreadSource, threads_layer
from daemon.log import get_logger
from daemon.memory.api import MemoryView
from daemon.memory.last_word import LastWord, away_phrase, clip
from daemon.scheduler import local_zone
from daemon.store.postgres import StoreAway

log = get_logger("context")

# The `away` layer speaks when the person last wrote at least this long before the message.
AWAY_AFTER = timedelta(hours=12)
AWAY_WORDS = 120  # characters of the person's last message shown


def time_layer(now: datetime, zone: str | None, notes: list[str]) -> Layer:
    """The clock line in the person's time zone (`zone`; UTC when unset or unknown)."""
    if zone:
        try:
            now = now.astimezone(ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError):
            notes.append(f"time: unknown time zone {zone!r}; showing UTC")
    label = now.tzname() or "UTC"
    line = f"It is {now.strftime('%A')}, {now.day} {now.strftime('%B %Y, %H:%M')} ({label})."
    return Layer(
        name="time",
        heading="## Now",
        entries=[Entry(key="time", body=line)],
        stable=False,
        truncatable=False,
    )


async def away_layer(
    view: MemoryView | None,
    prompt: str,
    *,
    now: datetime,
    zone: str | None,
    notes: list[str],
    skipped: dict[str, str],
    why: dict[str, str],
) -> Layer:
    """How long since the person last wrote and what about, when it is `AWAY_AFTER` or more."""
    layer = Layer(name="away", heading="## Time away", stable=False)
    if view is None:
        return layer
    try:
        last = await view.last_person_word(now, answering=prompt)
    except anyio.get_cancelled_exc_class():
        raise
    except StoreAway as exc:
        skipped["last_person_word"] = f"the memory store's server is away ({exc})"
        return layer
    except Exception as exc:
        log.warning("last message lookup failed; away layer left out", error=repr(exc))
        notes.append(f"away: the person's last message could not be read ({exc})")
        return layer
    if last is None:
        why["away"] = "not shown: the person has not written before"
        return layer
    gap = now - last.ts
    if gap < AWAY_AFTER:
        why["away"] = f"not shown: the person last wrote {_hm(gap)} ago (under {_hm(AWAY_AFTER)})"
        return layer
    why["away"] = (
        f"the person last wrote {away_phrase(gap)} ago ({_hm(gap)}, over {_hm(AWAY_AFTER)})"
    )
    layer.entries.append(
        memory_block(
            "away",
            away_text(last, gap, zone),
            kind="away",
            origin="system",
            ts=last.ts,
            source=f"session {last.session_id}",
            rank=0,
        )
    )
    return layer


def away_text(last: LastWord, gap: timedelta, zone: str | None) -> str:
    """The away layer's words: how long, since when (in `zone`), and the last message."""
    when = last.ts
    if zone:
        try:
            when = when.astimezone(ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError):
            pass
    said = f"{when.strftime('%a')} {when.day} {when.strftime('%b %Y, %H:%M')}"
    topic = f"The last thing discussed: {last.topic}. " if last.topic else ""
    return (
        f"It has been {away_phrase(gap)} since the person last wrote (on {said}). "
        f"{topic}Their last message: “{clip(last.text, AWAY_WORDS)}”"
    )


async def handover_layer(
    handover: HandoverDesk | None, notes: list[str], why: dict[str, str], *, fork: bool
) -> Layer:
    """The model handover letter (`daemon.context.handover`); never in a fork's context."""
    empty = Layer(name="handover", heading=HANDOVER_HEADING, stable=False)
    if handover is None:
        return empty
    if fork:
        if handover.pending is not None:
            why["handover"] = "not shown: a fork works from its brief (the letter is the trunk's)"
        return empty
    try:
        layer, why["handover"] = await handover.handover_layer()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        log.warning("handover letter could not be built; layer left out", error=repr(exc))
        notes.append(f"handover: the letter could not be built ({exc})")
        why["handover"] = "not shown: the handover letter could not be built"
        return empty
    return layer


async def open_threads_layer(
    threads: ThreadSource | None,
    *,
    clock: Clock,
    zone: str | None,
    notes: list[str],
    why: dict[str, str],
    fork: bool,
) -> Layer:
    """The open threads (`daemon.context.threads`); a fork works from its brief, without them."""
    if threads is None or fork:
        return Layer(name="threads", heading=THREADS_HEADING, stable=False)
    try:
        found = await threads.open_threads()
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        log.warning("open threads could not be read; threads layer left out", error=repr(exc))
        notes.append(f"threads: the open threads could not be read ({exc})")
        why["threads"] = "not shown: the open threads could not be read"
        return Layer(name="threads", heading=THREADS_HEADING, stable=False)
    local = local_zone(zone)
    layer, why["threads"] = threads_layer(
        found, today=clock.now().astimezone(local).date(), zone=local
    )
    return layer


def _hm(gap: timedelta) -> str:
    """A gap in days, hours and minutes: "21 d 3 h", "5 h 2 min", "4 min"."""
    minutes = int(gap.total_seconds() // 60)
    days, minutes = divmod(minutes, 1440)
    hours, minutes = divmod(minutes, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
