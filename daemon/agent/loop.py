"""The agent loop: context → model → tools → model … until the turn ends.

Features never live here: context comes from `before_agent_start` handlers, tools from
the registry. The loop reports what happens to a `TurnObserver` as typed turn events (the
chat gateway turns them into frames; a fork's parent relays them), writes every step to the
session transcript, and keeps every request inside the model's window (`budget.py`).

A turn never reaches the model without its assembled context: when assembly fails (a
required `before_agent_start` handler raised or timed out) or produced nothing, the turn
fails with `ContextFailed` instead of going ahead on a bare prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from daemon.agent.budget import FittedRequest, RequestBudget, RequestSizer, fit_request
from daemon.agent.provenance import TurnReading, read_turn
from daemon.agent.tool_steps import ToolSteps
from daemon.agent.turns import Delta, TurnObserver
from daemon.bus import EventBus, Gathered, HookFailed
from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import (
    BeforeAgentStart,
    CompactionApproaching,
    Composer,
    Contribution,
    SystemNote,
    TurnContext,
)
from daemon.log import bound_contextvars, get_logger
from daemon.models.base import (
    Completed,
    Message,
    ModelError,
    ModelResponse,
    SystemBlock,
    TextBlock,
    TextDelta,
    ToolCallStarted,
    Usage,
)
from daemon.models.roles import ModelRoles
from daemon.records import (
    MessageRecord,
    TurnEnd,
    TurnStatus,
)
from daemon.tokens import TokenCounter
from daemon.tools.registry import ToolRegistry

log = get_logger("agent")


class ContextFailed(ReverieError, RuntimeError):
    """The turn's context could not be assembled; the turn must not reach the model."""


@dataclass(kw_only=True)
class TurnResult:
    turn_id: str
    text: str
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    tool_calls: int = 0
    # The measured size of the next request (system + tools + the whole history), in tokens.
    context_tokens: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    vetoed: str | None = None


def compose_context(gathered: Gathered) -> TurnContext:
    """The turn's prompt from what the `before_agent_start` handlers returned.

    The first `Composer` (the context assembler) builds the prompt from every `Contribution`,
    in handler order; each `SystemNote` follows it, in handler order. A second composer is a
    wiring mistake: it is logged and left out. Raises what the composer raises.
    """
    composers = gathered.of(Composer)
    for handler, _ in composers[1:]:
        log.warning("a second context composer is left out", handler=handler)
    contributions = tuple(c for _, c in gathered.of(Contribution))
    composed = (
        composers[0][1].compose(contributions) if composers else TurnContext(system_blocks=())
    )
    notes = tuple(
        SystemBlock(text=n.text, cache_breakpoint=n.cache_breakpoint)
        for _, n in gathered.of(SystemNote)
    )
    if not notes:
        return composed
    return TurnContext(
        system_blocks=(*composed.system_blocks, *notes),
        report=composed.report,
        active_topics=composed.active_topics,
    )


@dataclass(kw_only=True)
class _Step:
    """What one turn's model steps share: the context, the budget, the result so far."""

    session: Any
    turn_id: str
    observer: TurnObserver
    started: float
    context: TurnContext
    system: list[SystemBlock]
    system_tokens: int
    budget: RequestBudget
    turns: list[list[Message]]
    result: TurnResult
    marks: dict[str, float] = field(default_factory=dict)
    fitted: FittedRequest | None = None


@dataclass(kw_only=True)
class AgentLoop:
    """Runs turns for sessions; between turns it keeps only token calibration and, per session,
    whether `compaction_approaching` was announced (reset by `reset_session`)."""

    roles: ModelRoles
    tools: ToolRegistry
    bus: EventBus
    clock: Clock
    counter: TokenCounter
    role: str = "trunk"
    max_tool_steps: int = 12
    history_max_messages: int = 400
    history_min_turns: int = 6
    compaction_threshold: float = 0.8
    context_window: int = 200_000
    session_kind: str = "trunk"
    depth: int = 0
    # Sessions whose memories this loop's turns must not see in their context (forks).
    exclude_sessions: tuple[str, ...] = ()
    # Calls of a concurrent tool (delegate) in one model step that run at the same time.
    max_parallel_tools: int = 1
    # Called after every model step with that step's usage; a returned reason ends the turn
    # there (stop_reason "stopped", the reason in `report["stopped"]`): a fork tree's budget.
    stop_check: Callable[[Usage], str | None] | None = None
    _announced: set[str] = field(default_factory=set)
    _sizer: RequestSizer | None = None
    # Whether the last turn was cancelled (a timeout, say) while a model call was streaming or
    # waiting for its first byte: then the time went to the model's silence, not the turn's work.
    cut_in_model_call: bool = False
    # The last system prompt's size: the estimate of the next one before it is assembled.
    _last_system_tokens: int = 0

    @property
    def sizer(self) -> RequestSizer:
        if self._sizer is None:
            self._sizer = RequestSizer(self.counter)
        return self._sizer

    def reset_session(self, session_id: str) -> None:
        """Forget per-session state (the compaction notice) for a session that ended."""
        self._announced.discard(session_id)

    def budget(self) -> RequestBudget:
        return RequestBudget(
            window=self.context_window,
            reserve_output=self.roles.max_tokens(self.role),
            min_turns=self.history_min_turns,
        )

    def _replayed(
        self, session: Any, history: list[tuple[str, list[Message]]], turn_id: str, prompt: str
    ) -> frozenset[str]:
        """The message ids this turn's request will replay, estimated before the context exists.

        The system prompt is not assembled yet, so the last turn's size stands in for it; the
        fit itself is the one the request uses, so the estimate errs by a turn at most.
        """
        estimate = fit_request(
            turns=[messages for _, messages in history],
            current=[Message.user(prompt)],
            fixed_tokens=self._last_system_tokens + self.sizer.tools(self.tools.specs()),
            budget=self.budget(),
            sizer=self.sizer,
            max_messages=self.history_max_messages,
        )
        kept = (
            [tid for tid, _ in history[len(history) - estimate.history_turns :]]
            if estimate.history_turns
            else []
        )
        # The current message is in the request whether or not its transcript record (written
        # while the context is assembled, and indexed as it lands) exists yet: its id is the turn's.
        return session.message_ids([*kept, turn_id]) | {turn_id}

    async def run_turn(
        self, session: Any, *, turn_id: str, prompt: str, observer: TurnObserver, ts: str
    ) -> TurnResult:
        """Run one turn to completion, reporting to `observer`.

        On cancellation the transcript gets a `turn_end` with status `cancelled` (shielded)
        and the cancellation propagates. Model errors propagate after being recorded;
        `ContextFailed` propagates when the context could not be assembled.
        """
        self.cut_in_model_call = False
        # The first turn loads the tokenizer's vocabulary (in a thread): its context is fitted
        # with exact counts, not the estimate a count on the loop gives while it loads.
        await self.counter.loaded()
        with bound_contextvars(session_id=session.id, turn_id=turn_id):
            return await self._run(
                session, turn_id=turn_id, prompt=prompt, observer=observer, ts=ts
            )

    async def _run(
        self, session: Any, *, turn_id: str, prompt: str, observer: TurnObserver, ts: str
    ) -> TurnResult:
        started = time.perf_counter()
        history = session.history(exclude_turn=turn_id)
        gathered, context = await self._context(
            session, history, turn_id=turn_id, prompt=prompt, ts=ts
        )
        context_ms = round((time.perf_counter() - started) * 1000, 2)
        if gathered.veto is not None:
            await self._end(session, turn_id, TurnStatus.VETOED, reason=gathered.veto.reason)
            return TurnResult(
                turn_id=turn_id, text="", stop_reason="vetoed", vetoed=gathered.veto.reason
            )
        system: list[SystemBlock] = list(context.system_blocks)
        system_tokens = sum(self.sizer.text(b.text) for b in system)
        self._last_system_tokens = system_tokens
        step = _Step(
            session=session,
            turn_id=turn_id,
            observer=observer,
            started=started,
            context=context,
            system=system,
            system_tokens=system_tokens,
            budget=self.budget(),
            turns=[messages for _, messages in history],
            result=TurnResult(
                turn_id=turn_id, text="", stop_reason="end_turn", report=dict(context.report)
            ),
        )
        try:
            await self._steps(step, prompt)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._end(session, turn_id, TurnStatus.CANCELLED)
            raise
        await self._finish(step, context_ms=context_ms)
        return step.result

    async def _end(self, session: Any, turn_id: str, status: TurnStatus, **fields: Any) -> None:
        """Write the turn's `turn_end` record."""
        await session.record(
            TurnEnd(turn_id=turn_id, status=status, ts=self.clock.now().isoformat(), **fields)
        )

    async def _context(
        self,
        session: Any,
        history: list[tuple[str, list[Message]]],
        *,
        turn_id: str,
        prompt: str,
        ts: str,
    ) -> tuple[Gathered, TurnContext]:
        """Record the message and assemble the turn's context, side by side.

        Returns what `before_agent_start` gathered and the composed context (empty when a
        handler vetoed); records the failed turn and raises `ContextFailed` when no context
        could be assembled.
        """
        event = BeforeAgentStart(
            session_id=session.id,
            turn_id=turn_id,
            prompt=prompt,
            previous_reply=session.last_reply(),
            session_kind=self.session_kind,
            replayed_message_ids=self._replayed(session, history, turn_id, prompt),
            exclude_sessions=self.exclude_sessions,
        )
        gate: dict[str, Any] = {}

        async def assemble() -> None:
            try:
                gate["gathered"] = await self.bus.gather(event)
            except HookFailed as exc:
                gate["failed"] = exc

        # The message is already durable in the inbox: its transcript write (an fsync) and
        # the context assembly overlap instead of adding up before the first token.
        async with anyio.create_task_group() as tg:
            if not session.has_message(turn_id):
                tg.start_soon(
                    session.record,
                    MessageRecord(id=turn_id, ts=ts, role="user", content=prompt, turn_id=turn_id),
                )
            tg.start_soon(assemble)
        failure: HookFailed | str | None = gate.get("failed")
        gathered: Gathered | None = gate.get("gathered")
        context = TurnContext(system_blocks=())
        if failure is None and gathered is not None and gathered.veto is None:
            try:
                context = compose_context(gathered)
            except Exception as exc:
                failure = f"composing the prompt failed: {type(exc).__name__}: {exc}"
            else:
                if not context.system_blocks:
                    failure = "no before_agent_start handler assembled a system prompt"
        if failure is not None or gathered is None:
            message = f"the context for this turn could not be assembled ({failure}); the model was not called"
            log.error("context assembly failed; turn not sent", error=str(failure))
            await self._end(session, turn_id, TurnStatus.FAILED, error=message)
            raise ContextFailed(message)
        return gathered, context

    async def _steps(self, step: _Step, prompt: str) -> None:
        """The model steps of one turn: ask, record, run the tools asked for, until done."""
        session, turn_id, result = step.session, step.turn_id, step.result
        # A turn tried before (the reply broke off, the daemon restarted) goes on after the
        # tool steps it finished, so no tool runs twice for one message.
        resumed = session.finished_steps(turn_id)
        if resumed:
            log.info("resuming a turn after its finished tool steps", steps=len(resumed) // 2)
        current: list[Message] = [Message.user(prompt), *resumed]
        texts: list[str] = [
            b.text
            for m in resumed
            if m.role == "assistant"
            for b in m.content
            if isinstance(b, TextBlock) and b.text
        ]
        for n in range(len(resumed) // 2, self.max_tool_steps + 1):
            offer_tools = n < self.max_tool_steps
            specs = self.tools.specs() if offer_tools else ()
            fitted = fit_request(
                turns=step.turns,
                current=current,
                fixed_tokens=step.system_tokens + self.sizer.tools(specs),
                budget=step.budget,
                sizer=self.sizer,
                max_messages=self.history_max_messages,
            )
            step.fitted = fitted
            reading = self._reading(fitted.messages, len(current), step.context, step.system)
            request = self.roles.request(
                self.role,
                messages=fitted.messages,
                system=step.system,
                tools=specs,
                task="chat" if self.session_kind == "trunk" else "delegate",
            )
            response = await self._stream_step(
                request, session, turn_id, step.observer, step.started, step.marks
            )
            result.steps += 1
            result.usage = result.usage + response.usage
            self._account(fitted.tokens, response)
            calls = response.tool_calls
            if response.text:
                texts.append(response.text)
                await session.record(
                    MessageRecord(
                        id=f"{turn_id}-a{n}",
                        ts=self.clock.now().isoformat(),
                        role="assistant",
                        content=response.text,
                        turn_id=turn_id,
                        has_tool_calls=bool(calls),
                    )
                )
            current.append(Message(role="assistant", content=response.content))
            result.stop_reason = response.stop_reason
            stopped = self.stop_check(response.usage) if self.stop_check is not None else None
            if stopped is not None:
                result.stop_reason = "stopped"
                result.report["stopped"] = stopped
                break
            if not calls:
                break
            results = await ToolSteps(
                tools=self.tools,
                clock=self.clock,
                depth=self.depth,
                session_kind=self.session_kind,
                max_parallel=self.max_parallel_tools,
            ).run(calls, session, turn_id, step.observer, reading=reading)
            result.tool_calls += len(calls)
            current.append(Message(role="user", content=tuple(results)))
            final = next(
                (
                    c.name
                    for c, r in zip(calls, results, strict=True)
                    if not r.is_error and self.tools.ends_turn(c.name)
                ),
                None,
            )
            if final is not None:
                result.stop_reason = final
                break
        result.text = "\n\n".join(texts)

    async def _finish(self, step: _Step, *, context_ms: float) -> None:
        """Record the answered turn, measure the next request whole, log, maybe announce."""
        result, fitted = step.result, step.fitted
        await self._end(
            step.session,
            step.turn_id,
            TurnStatus.ANSWERED,
            stop_reason=result.stop_reason,
            usage=result.usage.__dict__,
        )
        # The next request carries this turn too: measure it whole, before any bounding.
        full_history = step.session.history_turns()
        next_request = (
            step.system_tokens
            + self.sizer.tools(self.tools.specs())
            + sum(self.sizer.messages(t) for t in full_history)
        )
        result.context_tokens = next_request
        if fitted is not None:
            result.report["request"] = {
                **fitted.report(),
                "next_request_tokens": next_request,
                "limit": step.budget.limit,
            }
        log.info(
            "turn finished",
            steps=result.steps,
            tool_calls=result.tool_calls,
            stop_reason=result.stop_reason,
            input_tokens=result.usage.input_tokens,
            output_tokens=result.usage.output_tokens,
            cache_read_tokens=result.usage.cache_read_tokens,
            context_tokens=result.context_tokens,
            history_dropped=fitted.dropped_turns if fitted else 0,
            context_ms=context_ms,
            first_delta_ms=step.marks.get("first_delta_ms"),
            duration_ms=round((time.perf_counter() - step.started) * 1000, 1),
        )
        await self._maybe_announce_compaction(step.session, next_request)

    async def _stream_step(
        self,
        request: Any,
        session: Any,
        turn_id: str,
        observer: TurnObserver,
        started: float,
        marks: dict[str, float],
    ) -> ModelResponse:
        final: ModelResponse | None = None
        try:
            async for ev in self.roles.stream(request, session_id=session.id, turn_id=turn_id):
                if isinstance(ev, TextDelta):
                    marks.setdefault(
                        "first_delta_ms", round((time.perf_counter() - started) * 1000, 2)
                    )
                    observer(Delta(turn_id=turn_id, text=ev.text))
                elif isinstance(ev, ToolCallStarted):
                    pass  # announced when it runs, with its arguments validated
                elif isinstance(ev, Completed):
                    final = ev.response
        except anyio.get_cancelled_exc_class():
            self.cut_in_model_call = True
            raise
        if final is None:
            raise ModelError("the model's stream ended without a whole reply", retryable=True)
        return final

    def _reading(
        self,
        messages: list[Message],
        current: int,
        context: TurnContext,
        system: list[SystemBlock],
    ) -> TurnReading:
        """Whose word the tool calls answering this request act on (`provenance.read_turn`)."""
        cut = len(messages) - current
        return read_turn(
            session_kind=self.session_kind,
            history=messages[:cut],
            current=messages[cut:],
            system=[b.text for b in system],
            shown_origins=context.report.get("memory_origins", ()),
            output_origin=lambda name: t.output_origin if (t := self.tools.get(name)) else "tool",
        )

    def _account(self, counted: int, response: ModelResponse) -> None:
        """Calibrate local token counts against what the provider reported for the same request."""
        reported = response.usage.prompt_tokens
        if reported <= 0 or counted <= 0 or response.provider in ("offline", "scripted"):
            return
        # `counted` is already scaled: undo it so the calibration compares raw counts.
        self.counter.calibrate(round(counted / self.counter.scale), reported)

    async def _maybe_announce_compaction(self, session: Any, used: int) -> None:
        if used <= 0 or self.session_kind != "trunk":
            return  # a fork's window is its own: only the trunk winds down to sleep
        fraction = used / self.context_window
        if fraction >= self.compaction_threshold and session.id not in self._announced:
            self._announced.add(session.id)
            await self.bus.publish(
                CompactionApproaching(
                    session_id=session.id,
                    used_tokens=used,
                    window_tokens=self.context_window,
                    fraction=round(fraction, 4),
                )
            )
        elif fraction < self.compaction_threshold:
            self._announced.discard(session.id)
