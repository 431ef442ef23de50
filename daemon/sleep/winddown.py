"""Wind-down: when the trunk's context nears the compaction threshold, it is told it is getting tired.

On `compaction_approaching` the daemon becomes *winding-down* and every following turn of that
session gets a short system note (after the assembled context): finish the task in hand, start
nothing new. The cycle starts at the end of a turn — never mid-sentence — the first one the
model finished after seeing the note (`stop_reason == "end_turn"`), or anyway (the model
ignored the note: it hit its tool-step or token limit) once the context reaches
`sleep.hard_threshold` of the window or `sleep.wind_down_turns` turns have ended since the note.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.events import BeforeAgentStart, CompactionApproaching, SystemNote, TurnFinished
from daemon.lifecycle import DaemonState, Lifecycle
from daemon.log import get_logger
from daemon.settings import Settings

if TYPE_CHECKING:
    from daemon.agent.trunk import Trunk

log = get_logger("sleep")

TIRED_NOTE = """## You are getting tired
Your context is nearly full ({percent}% of your window). Finish the task in hand in this reply, \
do not start anything new, and end at a good stopping point: you will sleep after this turn \
and wake in a fresh session with your notes. If something stays open, say so plainly."""


@dataclass(kw_only=True)
class _Pending:
    session_id: str
    fraction: float
    noted: set[str] = field(default_factory=set)
    turns: int = 0


class WindDown:
    """Tracks one session's wind-down and starts the cycle at the right end of a turn."""

    def __init__(
        self,
        *,
        settings: Settings,
        lifecycle: Lifecycle,
        trunk: Trunk,
        start: Callable[[], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self.lifecycle = lifecycle
        self.trunk = trunk
        self._start = start
        self.pending: _Pending | None = None

    def cancel(self) -> None:
        """A cycle started (for whatever reason): the wind-down has done its work."""
        self.pending = None

    def describe(self) -> dict[str, Any] | None:
        p = self.pending
        if p is None:
            return None
        return {"session_id": p.session_id, "fraction": p.fraction, "turns_since_note": p.turns}

    async def on_compaction(self, event: CompactionApproaching) -> None:
        if self.trunk.session is None or event.session_id != self.trunk.session.id:
            return
        if self.pending is not None and self.pending.session_id == event.session_id:
            return
        self.pending = _Pending(session_id=event.session_id, fraction=event.fraction)
        if self.lifecycle.state is DaemonState.AWAKE:
            self.lifecycle.transition(
                DaemonState.WINDING_DOWN,
                detail=f"context at {event.fraction:.0%} of the window: finishing the current task before sleeping",
            )
        log.info(
            "wind-down: the trunk is told it is getting tired",
            session_id=event.session_id,
            fraction=event.fraction,
        )
        if event.fraction >= self.settings.sleep.hard_threshold:
            log.info(
                "wind-down: over the hard threshold; sleeping at the end of this turn",
                fraction=event.fraction,
            )
            await self._trigger()

    def on_before_agent_start(self, event: BeforeAgentStart) -> SystemNote | None:
        p = self.pending
        if p is None or event.session_kind != "trunk" or event.session_id != p.session_id:
            return None
        p.noted.add(event.turn_id)
        percent = round(p.fraction * 100)
        return SystemNote(text=TIRED_NOTE.format(percent=percent))

    async def on_turn_finished(self, event: TurnFinished) -> None:
        """On `turn_finished`: start the cycle when the noted turn ended well, or anyway past the limits."""
        p = self.pending
        if p is None or event.session_id != p.session_id or event.turn_id not in p.noted:
            return
        p.turns += 1
        window = self.trunk.loop.context_window
        fraction = event.context_tokens / window if window else 0.0
        finished = event.stop_reason == "end_turn"
        if (
            finished
            or fraction >= self.settings.sleep.hard_threshold
            or p.turns >= self.settings.sleep.wind_down_turns
        ):
            log.info(
                "wind-down: starting the sleep cycle at the end of the turn",
                turn_id=event.turn_id,
                stop_reason=event.stop_reason,
                fraction=round(fraction, 4),
                turns_since_note=p.turns,
            )
            await self._trigger()

    async def _trigger(self) -> None:
        self.pending = None
        await self._start()
