"""The event bus: the daemon's one hook system. Features register handlers; publishers fire events.

The bus imports no feature. Handlers are ordered by priority, then registration order.

Gates (`gather`, or `emit_gate` when only a veto matters) run their handlers one after
another in the publisher's task and stop at the first veto. A handler contributes by returning
a value, which `gather` hands back in handler order, rather than by changing the event. A
failing or timed-out gate handler is logged and skipped, never a veto by accident. A gate
handler registered with `required=True` is one the gated action cannot do without (the context
assembler on `before_agent_start`): its failure or timeout raises `HookFailed`, so the action
fails visibly instead of going ahead without it.

Observers (`publish`) are delivered in the task group the bus owns, each handler in a task of
its own under its own timeout, so a slow observer never delays the publisher; an exception or
a timeout is logged and the other handlers are not affected. A hook whose outcome matters to
its publisher (`HookSpec.wait`), or a publish with `wait=True` (the daemon's last
`session_shutdown`), is delivered the same way but awaited. `drain()` waits until nothing is
in flight. Cancellation of a caller is always re-raised.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup

from daemon.errors import ReverieError
from daemon.events import HOOKS, Event, HookKind, HookSpec
from daemon.log import get_logger

log = get_logger("bus")

E = TypeVar("E", bound=Event)
T = TypeVar("T")
Handler = Callable[[Any], Awaitable[Any] | Any]


@dataclass(frozen=True, kw_only=True)
class Veto:
    """Returned by a gate handler to stop what the event announces."""

    reason: str
    by: str = ""


@dataclass(frozen=True, kw_only=True)
class Contributed:
    """What one gate handler returned, with the handler's name (for labels and reports)."""

    handler: str
    value: Any


@dataclass(frozen=True, kw_only=True)
class Gathered:
    """A gate's outcome: the veto that stopped it (if any) and the contributions before it."""

    veto: Veto | None
    contributions: tuple[Contributed, ...] = ()

    def of(self, kind: type[T]) -> list[tuple[str, T]]:
        """The contributions that are a `kind`, as (handler, value), in handler order."""
        return [(c.handler, c.value) for c in self.contributions if isinstance(c.value, kind)]


class HookFailed(ReverieError, RuntimeError):
    """A required gate handler failed or timed out; what the gate announces must not go ahead."""

    def __init__(self, hook: str, handler: str, reason: str) -> None:
        super().__init__(f"{hook} handler {handler} failed: {reason}")
        self.hook = hook
        self.handler = handler
        self.reason = reason


class BusNotRunning(ReverieError, RuntimeError):
    """An observer event was published with handlers to deliver it to, outside `async with bus`."""


@dataclass(frozen=True, kw_only=True)
class _Subscription:
    event_type: type[Event]
    handler: Handler
    name: str
    priority: int
    seq: int
    timeout_s: float
    required: bool = False


class EventBus:
    """Typed publish/subscribe with per-hook error policy and per-handler timeouts.

    An async context manager with one owner (the daemon's exit stack): observers are
    delivered in its task group, so they can only be published while it is entered. Leaving
    it waits for the handlers still in flight (each bounded by its timeout).
    """

    def __init__(self, name: str = "event-bus") -> None:
        self.name = name
        self._subs: dict[type[Event], list[_Subscription]] = {}
        self._seq = itertools.count()
        self._tg: TaskGroup | None = None
        # Holds the task group between __aenter__ and __aexit__ (entered with `async with`).
        self._owner: AsyncExitStack | None = None
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def __aenter__(self) -> EventBus:
        if self._tg is not None:
            raise RuntimeError(f"{self.name} is already running; it has one owner")
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._owner = stack.pop_all()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        owner, self._owner, self._tg = self._owner, None, None
        assert owner is not None
        return await owner.__aexit__(*exc)

    @property
    def running(self) -> bool:
        return self._tg is not None

    def on(
        self,
        event_type: type[E],
        handler: Callable[[E], Awaitable[Any] | Any],
        *,
        priority: int = 100,
        name: str | None = None,
        timeout_s: float | None = None,
        required: bool = False,
    ) -> Callable[[], None]:
        """Register `handler` for `event_type`; return a function that unregisters it.

        Lower `priority` runs first. `timeout_s` defaults to the hook's own timeout.
        `required` (gates only): the handler's failure fails the gate (`HookFailed`).
        """
        if event_type not in HOOKS:
            raise ValueError(
                f"{event_type.__name__} is not a hook; known hooks: {sorted(s.name for s in HOOKS.values())}"
            )
        spec = HOOKS[event_type]
        if required and spec.kind is not HookKind.GATE:
            raise ValueError(
                f"{spec.name} is an observer hook: its handlers are isolated and cannot be required"
            )
        sub = _Subscription(
            event_type=event_type,
            handler=handler,
            name=name or str(getattr(handler, "__qualname__", repr(handler))),
            priority=priority,
            seq=next(self._seq),
            timeout_s=timeout_s if timeout_s is not None else spec.timeout_s,
            required=required,
        )
        subs = self._subs.setdefault(event_type, [])
        subs.append(sub)
        subs.sort(key=lambda s: (s.priority, s.seq))

        def unsubscribe() -> None:
            if sub in subs:
                subs.remove(sub)

        return unsubscribe

    def handlers(self, event_type: type[Event]) -> list[str]:
        """Names of the handlers for `event_type`, in the order they run."""
        return [s.name for s in self._subs.get(event_type, [])]

    def policy(self, event_type: type[Event]) -> list[dict[str, Any]]:
        """Each handler's name, order, timeout and whether the hook fails with it."""
        spec = HOOKS[event_type]
        return [
            {
                "hook": spec.name,
                "kind": spec.kind.value,
                "handler": s.name,
                "priority": s.priority,
                "timeout_s": s.timeout_s,
                "required": s.required,
                "awaited": spec.wait,
            }
            for s in self._subs.get(event_type, [])
        ]

    async def _call(self, sub: _Subscription, event: Event) -> tuple[bool, Any]:
        """Run one handler under its timeout; return (ok, result), or raise `HookFailed` if required."""
        hook = HOOKS[type(event)].name
        try:
            with anyio.fail_after(sub.timeout_s):
                result = sub.handler(event)
                if inspect.isawaitable(result):
                    result = await result
            return True, result
        except TimeoutError:
            log.warning(
                "hook handler timed out",
                hook=hook,
                handler=sub.name,
                timeout_s=sub.timeout_s,
                required=sub.required,
            )
            if sub.required:
                raise HookFailed(hook, sub.name, f"timed out after {sub.timeout_s:g}s") from None
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.error(
                "hook handler failed",
                hook=hook,
                handler=sub.name,
                error=repr(exc),
                required=sub.required,
                exc_info=True,
            )
            if sub.required:
                raise HookFailed(hook, sub.name, f"{type(exc).__name__}: {exc}") from exc
        return False, None

    async def gather(self, event: Event) -> Gathered:
        """Run a gate hook's handlers in order; return the first veto and what each returned.

        A handler contributes by returning a value (anything but None or a `Veto`), never by
        changing the event. Stops at the first veto. Raises `HookFailed` when a required
        handler fails or times out.
        """
        spec = HOOKS[type(event)]
        if spec.kind is not HookKind.GATE:
            raise TypeError(f"{spec.name} is an observer hook; use publish()")
        contributions: list[Contributed] = []
        for sub in list(self._subs.get(type(event), [])):
            ok, result = await self._call(sub, event)
            if not ok or result is None:
                continue
            if isinstance(result, Veto):
                veto = result if result.by else Veto(reason=result.reason, by=sub.name)
                log.info("hook vetoed", hook=spec.name, handler=sub.name, reason=veto.reason)
                return Gathered(veto=veto, contributions=tuple(contributions))
            contributions.append(Contributed(handler=sub.name, value=result))
        return Gathered(veto=None, contributions=tuple(contributions))

    async def emit_gate(self, event: Event) -> Veto | None:
        """Run a gate hook's handlers in order; return the first veto, or None.

        Raises `HookFailed` when a required handler fails or times out.
        """
        return (await self.gather(event)).veto

    def _observer(self, event: Event) -> HookSpec:
        spec = HOOKS[type(event)]
        if spec.kind is not HookKind.OBSERVER:
            raise TypeError(f"{spec.name} is a gate hook; use emit_gate()")
        return spec

    async def publish(self, event: Event, *, wait: bool | None = None) -> None:
        """Deliver an observer event to every handler, each isolated under its own timeout.

        Returns once the handlers are started, or, when the hook's policy (or `wait=True`)
        says the publisher waits, once every handler has finished or timed out; call it in a
        shielded scope for delivery that must survive the caller's cancellation.
        """
        spec = self._observer(event)
        if spec.wait if wait is None else wait:
            await self.deliver(event)
        else:
            self.publish_nowait(event)

    def publish_nowait(self, event: Event) -> None:
        """Start every handler of an observer event in the bus's task group and return at once.

        For publishers that cannot await (a state change); a hook whose publisher must wait
        (`HookSpec.wait`) is refused. Raises `BusNotRunning` when there are handlers and the
        bus is not entered.
        """
        spec = self._observer(event)
        if spec.wait:
            raise TypeError(f"{spec.name} is delivered to its publisher's wait; use publish()")
        subs = list(self._subs.get(type(event), []))
        if not subs:
            return
        if self._tg is None:
            raise BusNotRunning(
                f"{self.name} is not running: enter it (`async with bus`) before publishing {spec.name}"
            )
        for sub in subs:
            if self._in_flight == 0:
                self._idle = anyio.Event()
            self._in_flight += 1
            self._tg.start_soon(self._deliver_one, sub, event, name=f"{spec.name}:{sub.name}")

    async def _deliver_one(self, sub: _Subscription, event: Event) -> None:
        try:
            await self._call(sub, event)
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def deliver(self, event: Event) -> int:
        """Run every handler of an observer event side by side and wait; return how many failed.

        Each handler is isolated under its own timeout, so this returns within the longest of
        them. Cancellation of the caller cancels the handlers and is re-raised.
        """
        spec = self._observer(event)
        failed = 0

        async def one(sub: _Subscription) -> None:
            nonlocal failed
            ok, _ = await self._call(sub, event)
            failed += not ok

        async with anyio.create_task_group() as tg:
            for sub in list(self._subs.get(type(event), [])):
                tg.start_soon(one, sub, name=f"{spec.name}:{sub.name}")
        return failed

    async def drain(self) -> None:
        """Return once no handler started by `publish` is still running (new ones included)."""
        while self._in_flight:
            await self._idle.wait()
