"""The event bus: features register handlers on hooks; the agent loop only fires events.

The bus imports no feature. Handlers run in a deterministic order (priority, then
registration order). Gates (`emit_gate`) run sequentially and stop at the first veto; a
failing or timed-out gate handler is logged and skipped, never a veto by accident.
Observers (`publish`) run sequentially too, each isolated: an exception or a timeout is
logged and the next handler still runs. Cancellation of the caller is always re-raised.

A gate handler registered with `required=True` is one the gated action cannot do without
(the context assembler on `before_agent_start`): its failure or timeout raises `HookFailed`
from `emit_gate`, so the action fails visibly instead of going ahead without it.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio

from daemon.events import HOOKS, Event, HookKind
from daemon.log import get_logger

log = get_logger("bus")

E = TypeVar("E", bound=Event)
Handler = Callable[[Any], Awaitable[Any] | Any]


@dataclass(frozen=True, kw_only=True)
class Veto:
    """Returned by a gate handler to stop what the event announces."""

    reason: str
    by: str = ""


class HookFailed(RuntimeError):
    """A required gate handler failed or timed out; what the gate announces must not go ahead."""

    def __init__(self, hook: str, handler: str, reason: str) -> None:
        super().__init__(f"{hook} handler {handler} failed: {reason}")
        self.hook = hook
        self.handler = handler
        self.reason = reason


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
    """Typed publish/subscribe with per-hook error policy and per-handler timeouts."""

    def __init__(self) -> None:
        self._subs: dict[type[Event], list[_Subscription]] = {}
        self._seq = itertools.count()

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

    async def emit_gate(self, event: Event) -> Veto | None:
        """Run a gate hook's handlers in order; return the first veto, or None.

        Raises `HookFailed` when a required handler fails or times out.
        """
        spec = HOOKS[type(event)]
        if spec.kind is not HookKind.GATE:
            raise TypeError(f"{spec.name} is an observer hook; use publish()")
        for sub in list(self._subs.get(type(event), [])):
            ok, result = await self._call(sub, event)
            if ok and isinstance(result, Veto):
                veto = result if result.by else Veto(reason=result.reason, by=sub.name)
                log.info("hook vetoed", hook=spec.name, handler=sub.name, reason=veto.reason)
                return veto
        return None

    async def publish(self, event: Event) -> int:
        """Deliver an observer event to every handler in isolation; return how many failed."""
        spec = HOOKS[type(event)]
        if spec.kind is not HookKind.OBSERVER:
            raise TypeError(f"{spec.name} is a gate hook; use emit_gate()")
        failed = 0
        for sub in list(self._subs.get(type(event), [])):
            ok, _ = await self._call(sub, event)
            failed += not ok
        return failed
