"""The daemon's one state, owned by one service: `starting → awake ⇄ winding-down → asleep → awake → stopping`.

Only legal transitions are accepted; an illegal one raises `IllegalTransition` saying what
the state is and what it may become, so a caller that races another (a `reverie sleep`
while a cycle is already running) fails with an actionable message instead of corrupting
the state. Every change is delivered to the listeners (the chat server broadcasts it as a
`state` frame); a failing listener is logged and the others still hear of it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import anyio

from daemon.clock import Clock
from daemon.log import get_logger

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


class IllegalTransition(RuntimeError):
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


@dataclass(frozen=True, kw_only=True)
class StateChange:
    """One transition, as listeners receive it."""

    previous: DaemonState
    state: DaemonState
    at: datetime
    detail: str = ""


Listener = Callable[[StateChange], Any]


class Lifecycle:
    """Holds the daemon state; `transition()` is the only way to change it."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._state = DaemonState.STARTING
        self.since = clock.now()
        self.detail = ""
        self.phase: str | None = None
        self._listeners: list[Listener] = []
        self._changed = anyio.Event()

    @property
    def state(self) -> DaemonState:
        return self._state

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(change)` on every transition; return a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def can(self, target: DaemonState) -> bool:
        return target in _LEGAL[self._state]

    def transition(self, target: DaemonState, *, detail: str = "") -> StateChange:
        """Move to `target` or raise `IllegalTransition`; listeners hear of it synchronously."""
        if target not in _LEGAL[self._state]:
            raise IllegalTransition(self._state, target)
        change = StateChange(previous=self._state, state=target, at=self.clock.now(), detail=detail)
        self._state = target
        self.since = change.at
        self.detail = detail
        if target is not DaemonState.ASLEEP:
            self.phase = None
        log.info(
            "state changed",
            previous=change.previous.value,
            state=target.value,
            detail=detail or None,
        )
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception as exc:
                log.error(
                    "state listener failed",
                    listener=getattr(listener, "__qualname__", repr(listener)),
                    error=repr(exc),
                )
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
