"""The assembler's reads of memory: each one that fails leaves its layer out, never the turn.

A read the store's server cannot answer (`StoreAway`) is recorded as skipped (the prompt then
says memory is unavailable); any other failure is logged and noted in the report. A
cancellation always propagates. Text quoting what was written earlier is marked where a line
states a value since corrected.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio

from daemon.context.layers import Layer
from daemon.log import get_logger
from daemon.memory.api import LiveHistory, MemoryItem, MemoryView
from daemon.settings import Settings
from daemon.store.postgres import StoreAway

log = get_logger("context")

MemoryRead = Callable[[MemoryView], Awaitable[list[MemoryItem]]]
# Layers quoting what was written earlier, marked where a line states a value since corrected
# (summaries, months and recalled chunks come marked from memory; facts are current values).
MARKED_LAYERS = ("wake", "reflection", "handover", "threads", "topics", "journal")
# Automatic recall's time within a turn's assembly, at most: well under the assembly hook's
# own limit (10 s), so that on a machine too busy to recall in time the turn is answered
# without its recalled memories (said in the report) instead of failing whole.
RECALL_SECONDS = 6.0


async def ask(
    view: MemoryView | None,
    what: str,
    notes: list[str],
    call: MemoryRead,
    skipped: dict[str, str],
) -> list[MemoryItem]:
    """`call` on `view` (named `what` in notes); nothing when there is no view or it fails."""
    if view is None:
        return []
    try:
        return list(await call(view))
    except anyio.get_cancelled_exc_class():
        raise
    except StoreAway as exc:
        # Not a failure of this turn: the server is away and the store says so at once.
        skipped[what] = f"the memory store's server is away ({exc})"
        notes.append(f"memory {what} skipped: the store's server is away; its layer is missing")
        return []
    except Exception as exc:
        log.warning("memory view failed; layer left out this turn", call=what, error=repr(exc))
        notes.append(
            f"memory {what} failed ({type(exc).__name__}: {exc}); its layer is missing this turn"
        )
        return []


async def auto_recall(
    view: MemoryView | None,
    settings: Settings,
    prompt: str,
    *,
    previous_reply: str,
    shown: frozenset[str],
    notes: list[str],
    live: LiveHistory | None,
    skipped: dict[str, str],
) -> list[MemoryItem]:
    """Automatic recall for `prompt` (nothing when it is off or the prompt is blank; nothing,
    with a note, when it takes longer than `RECALL_SECONDS`)."""
    mem = settings.memory
    if not mem.auto_recall or mem.auto_recall_max <= 0 or not prompt.strip():
        return []
    with anyio.move_on_after(RECALL_SECONDS):
        return await ask(
            view,
            "auto_recall",
            notes,
            lambda v: v.auto_recall(
                prompt,
                previous_reply=previous_reply,
                exclude_ids=shown,
                limit=mem.auto_recall_max,
                live=live,
            ),
            skipped,
        )
    log.warning("automatic recall out of time; left out this turn", seconds=RECALL_SECONDS)
    notes.append(
        f"memory auto_recall took over {RECALL_SECONDS:g} s (a busy machine?); "
        "its layer is missing this turn"
    )
    return []


async def mark_corrected(
    view: MemoryView | None, layers: dict[str, Layer], notes: list[str], skipped: dict[str, str]
) -> None:
    """Text written before a correction (the letter, the last dream, a handover, the open
    threads, topic notes, the journal) shows an old value only with its correction note:
    each such line is marked here, before the fit, so the note is counted and kept."""
    entries = [(n, i) for n in MARKED_LAYERS for i, _ in enumerate(layers[n].entries)]
    if not entries or view is None or skipped:
        return
    bodies = [layers[n].entries[i].body for n, i in entries]
    try:
        marked = await view.mark_corrected(bodies)
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:  # a layer unmarked beats a turn failed; said in the report
        notes.append(f"corrections: not marked ({type(exc).__name__}: {exc})")
        return
    for (n, i), body, new in zip(entries, bodies, marked, strict=True):
        if new != body:
            layers[n].entries[i] = replace(layers[n].entries[i], body=new)
