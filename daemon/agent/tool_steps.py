"""One model step's tool calls: recorded, run (concurrent ones side by side), reported.

The agent loop hands each step's calls here. Every call is written to the transcript before
it runs and its result after; the observer sees it start, its progress and its end; a tool
acts with a `ToolContext` that says whose words the turn acts on (`TurnReading`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio

from daemon.agent.provenance import TurnReading
from daemon.agent.turns import ToolPhase, TurnObserver
from daemon.clock import Clock
from daemon.models.base import ToolResultBlock, ToolUseBlock
from daemon.records import ToolCallRecord, ToolResultRecord
from daemon.tools.registry import ToolContext, ToolRegistry
from daemon.tools.summary import summarise_call


@dataclass(frozen=True, kw_only=True)
class ToolSteps:
    """Runs the tool calls of one model step for a loop at `depth`."""

    tools: ToolRegistry
    clock: Clock
    depth: int
    session_kind: str
    # Calls of a concurrent tool (delegate) in one step that run at the same time.
    max_parallel: int = 1

    async def run(
        self,
        calls: list[ToolUseBlock],
        session: Any,
        turn_id: str,
        observer: TurnObserver,
        *,
        reading: TurnReading,
    ) -> list[ToolResultBlock]:
        """Run one step's tool calls; return their results in call order.

        Calls run in order, except that consecutive calls of a concurrent tool (delegate) run
        together, at most `max_parallel_tools` at a time. Cancellation cancels every call.
        """
        now = self.clock.now().isoformat()
        await session.record(
            *(
                ToolCallRecord(turn_id=turn_id, call_id=c.id, name=c.name, input=c.input, ts=now)
                for c in calls
            )
        )
        results: list[ToolResultBlock | None] = [None] * len(calls)

        async def run_one(
            i: int, call: ToolUseBlock, limiter: anyio.CapacityLimiter | None = None
        ) -> None:
            if limiter is not None:
                async with limiter:
                    results[i] = await self.run_one(call, session, turn_id, observer, reading)
            else:
                results[i] = await self.run_one(call, session, turn_id, observer, reading)

        i = 0
        while i < len(calls):
            if not self.tools.is_concurrent(calls[i].name):
                await run_one(i, calls[i])
                i += 1
                continue
            j = i
            while j < len(calls) and self.tools.is_concurrent(calls[j].name):
                j += 1
            limiter = anyio.CapacityLimiter(self.max_parallel)
            async with anyio.create_task_group() as tg:
                for k in range(i, j):
                    tg.start_soon(run_one, k, calls[k], limiter)
            i = j
        return [r for r in results if r is not None]

    async def run_one(
        self,
        call: ToolUseBlock,
        session: Any,
        turn_id: str,
        observer: TurnObserver,
        reading: TurnReading,
    ) -> ToolResultBlock:
        tool = self.tools.get(call.name)
        observer(
            ToolPhase(
                turn_id=turn_id,
                name=call.name,
                phase="started",
                depth=self.depth,
                summary=summarise_call(
                    call.name, call.input, subject=tool.subject if tool else None
                ),
            )
        )

        def progress(msg: str, _name: str = call.name) -> None:
            observer(
                ToolPhase(
                    turn_id=turn_id,
                    name=_name,
                    phase="progress",
                    detail=msg[:500],
                    depth=self.depth,
                )
            )

        ctx = ToolContext(
            session_id=session.id,
            turn_id=turn_id,
            session_kind=self.session_kind,
            depth=self.depth,
            call_id=call.id,
            progress=progress,
            observer=observer,
            # The permission guard writes its decision into this session's transcript.
            # `reading` says whose words a fact stored now is (`TurnReading.origin_of`).
            extras={"origin": reading.origin, "reading": reading, "record": session.record},
        )
        outcome = await self.tools.call(call.name, call.input, ctx)
        observer(
            ToolPhase(
                turn_id=turn_id,
                name=call.name,
                phase="finished",
                is_error=outcome.is_error,
                depth=self.depth,
            )
        )
        await session.record(
            ToolResultRecord(
                turn_id=turn_id,
                call_id=call.id,
                name=call.name,
                content=outcome.content,
                is_error=outcome.is_error,
                ts=self.clock.now().isoformat(),
            )
        )
        return ToolResultBlock(
            tool_use_id=call.id, content=outcome.content, is_error=outcome.is_error
        )
