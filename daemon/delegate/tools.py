"""The two delegate tools: `delegate(task, context)` and a fork's `task_complete(...)`.

`delegate` is offered to a session only below the depth limit, and refused (a tool error the
model reads) if called anyway. `task_complete` exists only inside a fork: its successful call
ends the fork's turn, and its arguments are the fork's structured result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from daemon.tools.registry import Tool, ToolContext, ToolError

OUTCOMES = ("success", "partial", "failed")

DELEGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "maxLength": 2000,
            "description": "The objective, in one or two sentences: what the fork must produce.",
        },
        "context": {
            "type": "string",
            "maxLength": 20000,
            "description": "Everything the fork needs to know: it sees none of this conversation, only this brief "
            "(plus the same memory and tools).",
        },
        "tools": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": 64,
            "description": 'Optional: the only tools the fork may use (names, e.g. ["read_file", '
            '"search_files"]) — a narrower set for a narrow task. Default: every tool you may grant. '
            "A fork never gets a tool you cannot grant.",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}

TASK_COMPLETE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {
            "type": "string",
            "minLength": 1,
            "maxLength": 12000,
            "description": "The result for whoever delegated: findings, answer, decisions — complete but dense.",
        },
        "outcome": {
            "type": "string",
            "enum": list(OUTCOMES),
            "description": "Did the task succeed?",
        },
        "artifacts": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Optional references produced (fact ids, file paths, session ids).",
        },
    },
    "required": ["summary", "outcome"],
    "additionalProperties": False,
}

DELEGATE_DESCRIPTION = (
    "Hand a self-contained piece of work to a fork of yourself: same persona and memory, a clean context "
    "and your brief (it never sees this conversation). Use it for tool-heavy or long work so your own "
    "context stays clear. The fork's result comes back as this tool's result. Several delegate calls in "
    "one step run in parallel."
)
TASK_COMPLETE_DESCRIPTION = (
    "Finish your task: report the result to whoever delegated it. Call it exactly once, when done "
    "(or when you cannot go further: outcome 'partial' or 'failed'). Your turn ends with it."
)


@dataclass
class Completion:
    """What a fork reported through `task_complete` (empty until it does)."""

    summary: str = ""
    outcome: str = ""
    artifacts: list[str] = field(default_factory=list)
    called: bool = False


DelegateHandler = Callable[[ToolContext, str, str, "list[str] | None"], Awaitable[str]]


def delegate_tool(handler: DelegateHandler, *, timeout_s: float) -> Tool:
    """The `delegate` tool over `handler(ctx, task, context, tools)` (concurrent: parallel forks)."""

    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        tools = args.get("tools")
        return await handler(
            ctx,
            str(args["task"]).strip(),
            str(args.get("context", "")).strip(),
            [str(t) for t in tools] if tools is not None else None,
        )

    return Tool(
        name="delegate",
        description=DELEGATE_DESCRIPTION,
        input_schema=DELEGATE_SCHEMA,
        handler=run,
        timeout_s=timeout_s,
        concurrent=True,
        # A fork's findings carry whatever it read (files, pages): outside text to the parent.
        output_origin="tool",
        # The fork's own result is already bounded; the parent must see its end marker.
        max_output_chars=16_000,
    )


def task_complete_tool(completion: Completion) -> Tool:
    """A fork's `task_complete`, recording into `completion`; a second call is refused."""

    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        if completion.called:
            raise ToolError("task_complete was already called; the task is finished")
        completion.summary = str(args["summary"]).strip()
        completion.outcome = str(args["outcome"])
        completion.artifacts = [str(a) for a in args.get("artifacts", [])]
        completion.called = True
        return "reported; your task is finished"

    return Tool(
        name="task_complete",
        description=TASK_COMPLETE_DESCRIPTION,
        input_schema=TASK_COMPLETE_SCHEMA,
        handler=run,
        timeout_s=5.0,
        ends_turn=True,
        output_origin=None,
    )
