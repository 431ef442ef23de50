"""The daemon's one state, owned by one service: `starting → awake ⇄ winding-down → asleep → awake → stopping`.

Only legal transitions are accepted; an illegal one raises `IllegalTransition` saying what
the state is and what it may become, so a caller that races another (a `reverie sleep`
while a cycle is already running) fails with an actionable message instead of corrupting
the state. Every change is published on the bus as `StateChanged` (the chat server
broadcasts it as a `state` frame), delivered like any observer: a failing handler is logged
and the others still hear of it, and none of them delays the transition.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import anyio

from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import StateChanged
from daemon.log import get_logger

if TYPE_CHECKING:
    from daemon.bus import EventBus

log = get_logger("lifecycle")


class DaemonState(enum.StrEnum):
    STARTING = "starting"
    AWAKE = "awake"
    WINDING_DOWN = "winding-down"
    ASLEEP = "asleep"
    STOPPING = "stopping"


_LEGAL: dict[DaemonState, frozenset[DaemonState]] = {
    DaemonState.STARTING: frozenset({DaemonState.AWAKE, DaemonState.STOPPING}),
    DaemonState.AWAKE: frozenset({DaemonState.WINDING_DOWN, DaemonState.STOPPING}),
    # A wind-down can be called off (a person's message during it, a failed switch).
    DaemonState.WINDING_DOWN: frozenset(
        {DaemonState.ASLEEP, DaemonState.AWAKE, DaemonState.STOPPING}
    ),
    DaemonState.ASLEEP: frozenset({DaemonState.AWAKE, DaemonState.STOPPING}),
    DaemonState.STOPPING: frozenset(),
}


def legal_targets(state: DaemonState) -> frozenset[DaemonState]:
    return _LEGAL[state]


class IllegalTransition(ReverieError, RuntimeError):
    """A state change that the lifecycle does not allow from the current state."""

    def __init__(self, current: DaemonState, target: DaemonState) -> None:
        allowed = (
            ", ".join(sorted(s.value for s in _LEGAL[current]))
            or "nothing (the daemon is stopping)"
        )
        super().__init__(
            f"cannot go from {current.value} to {target.value}; from {current.value} the daemon may become: {allowed}"
        )
        self.current = current
        self.target = target


class Lifecycle:
    """Holds the daemon state; `transition()` is the only way to change it."""

    def __init__(self, clock: Clock, bus: EventBus | None = None) -> None:
        self.clock = clock
        self.bus = bus
        self._state = DaemonState.STARTING
        self.since = clock.now()
        self.detail = ""
        self.phase: str | None = None
        self._changed = anyio.Event()

    @property
    def state(self) -> DaemonState:
        return self._state

    def can(self, target: DaemonState) -> bool:
        return target in _LEGAL[self._state]

    def transition(self, target: DaemonState, *, detail: str = "") -> StateChanged:
        """Move to `target` or raise `IllegalTransition`; publish `StateChanged` without waiting."""
        if target not in _LEGAL[self._state]:
            raise IllegalTransition(self._state, target)
        previous = self._state
        if target is not DaemonState.ASLEEP:
            self.phase = None
        change = StateChanged(
            previous=previous, state=target, at=self.clock.now(), detail=detail, phase=self.phase
        )
        self._state = target
        self.since = change.at
        self.detail = detail
        log.info(
            "state changed",
            previous=previous.value,
            state=target.value,
            detail=detail or None,
        )
        if self.bus is not None:
            self.bus.publish_nowait(change)
        changed, self._changed = self._changed, anyio.Event()
        changed.set()
        return change

    def set_phase(self, phase: str | None) -> None:
        """Name what the current state is doing (a sleep cycle's phase), for `status`."""
        self.phase = phase

    async def wait_for(self, *states: DaemonState) -> DaemonState:
        """Return once the state is one of `states` (at once when it already is)."""
        while self._state not in states:
            await self._changed.wait()
        return self._state

    def snapshot(self) -> dict[str, Any]:
        return {
            "state": self._state.value,
            "since": self.since.isoformat(),
            "detail": self.detail or None,
            "phase": self.phase,
        }
