"""The memory tools the model calls: remember, correct, retract, recall, recall_session, remember_session.

What the model stores carries the origin the agent loop gives it (`extras["reading"]`, see
`daemon.agent.provenance`): `person` when the fact's words are the person's own (whatever
memory the turn read), else the turn's origin — `tool` once it read outside text, `agent`
otherwise and always in a fork; `agent` when no loop says. The person's own `remember` (CLI, socket command) goes through
`MemorySystem.remember` with origin `person`. Refusals and bad ids come back as tool errors
the model can read. The write tools' output is a receipt (no text from elsewhere); recall's is
the agent's own memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daemon.memory.facts import FactError
from daemon.memory.ids import fact_uid
from daemon.memory.recall import RecallError
from daemon.models.base import ModelError
from daemon.tools.registry import Tool, ToolContext, ToolError

if TYPE_CHECKING:
    from daemon.memory.system import MemorySystem

REMEMBER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {
            "type": "string",
            "description": "One atomic fact, in plain words. Relative dates are pinned automatically.",
        },
        "target": {
            "type": "string",
            "enum": ["memory", "profile"],
            "description": "'memory' (default): the running log. 'profile': a stable fact about the person.",
        },
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional keywords."},
    },
    "required": ["text"],
    "additionalProperties": False,
}
CORRECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The fact to correct, e.g. fact:12."},
        "text": {"type": "string", "description": "The corrected fact."},
    },
    "required": ["id", "text"],
    "additionalProperties": False,
}
RETRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The fact to retract, e.g. fact:12."},
        "reason": {"type": "string", "description": "Why it no longer holds."},
    },
    "required": ["id", "reason"],
    "additionalProperties": False,
}
RECALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to remember, as a question or keywords."}
    },
    "required": ["query"],
    "additionalProperties": False,
}
RECALL_SESSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session": {
            "type": "string",
            "description": "A session id or summary name as recall cites it (session-…).",
        },
        "query": {
            "type": "string",
            "description": "What to look for; the excerpts are centred on it.",
        },
    },
    "required": ["session", "query"],
    "additionalProperties": False,
}
REMEMBER_SESSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {},
    "additionalProperties": False,
}


def _origin(ctx: ToolContext, text: str | None = None) -> str:
    """Whose word the call acts on; with `text` (a fact to store), whose words that text is."""
    reading = ctx.extras.get("reading")
    if text is not None and reading is not None:
        return str(reading.origin_of(text))
    # Without a loop vouching for the turn, what the model stores is the agent's word.
    return str(ctx.extras.get("origin", "agent"))


def memory_tools(system: MemorySystem) -> list[Tool]:
    """Build the six memory tools over `system`."""
    return [
        remember_tool(system),
        correct_tool(system),
        retract_tool(system),
        recall_tool(system),
        recall_session_tool(system),
        remember_session_tool(system),
    ]


def remember_tool(system: MemorySystem) -> Tool:
    """`remember`: store one fact in the running log or the profile."""

    async def remember(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            result = await system.remember(
                str(args["text"]),
                target=str(args.get("target", "memory")),
                origin=_origin(ctx, str(args["text"])),
                tags=[str(t) for t in args.get("tags", [])],
            )
        except FactError as exc:
            raise ToolError(str(exc)) from None
        return f"{result.message}: {result.text}" if result.status == "stored" else result.message

    return Tool(
        name="remember",
        description="Store one explicit fact now, in the running memory log or in the person's profile. "
        "Use it when the person asks you to remember something or states a lasting fact about themselves.",
        input_schema=REMEMBER_SCHEMA,
        handler=remember,
        output_origin=None,
        timeout_s=30.0,
    )


def correct_tool(system: MemorySystem) -> Tool:
    """`correct`: replace a fact, the old one kept as history."""

    async def correct(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            result = await system.correct(
                str(args["id"]), str(args["text"]), origin=_origin(ctx, str(args["text"]))
            )
        except FactError as exc:
            raise ToolError(str(exc)) from None
        return f"{result.message}: {result.text}"

    return Tool(
        name="correct",
        description="Replace a remembered fact with a corrected one; the old one is kept as history.",
        input_schema=CORRECT_SCHEMA,
        handler=correct,
        output_origin=None,
        timeout_s=30.0,
    )


def retract_tool(system: MemorySystem) -> Tool:
    """`retract`: withdraw a fact that no longer holds."""

    async def retract(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            await system.retract(str(args["id"]), reason=str(args["reason"]), origin=_origin(ctx))
        except FactError as exc:
            raise ToolError(str(exc)) from None
        return f"{fact_uid(str(args['id']))} retracted (kept in history)"

    return Tool(
        name="retract",
        description="Withdraw a remembered fact that no longer holds; it stays in history.",
        input_schema=RETRACT_SCHEMA,
        handler=retract,
        output_origin=None,
        timeout_s=30.0,
    )


def recall_tool(system: MemorySystem) -> Tool:
    """`recall`: search memory and answer with citations."""

    async def recall(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            # The person's message this turn answers is its id: not read back as a memory.
            return await system.recall(
                str(args["query"]), session_id=ctx.session_id, answering=ctx.turn_id
            )
        except RecallError as exc:
            raise ToolError(str(exc)) from None

    return Tool(
        name="recall",
        description="Search memory (facts, past session summaries, transcripts) and answer with citations.",
        input_schema=RECALL_SCHEMA,
        handler=recall,
        output_origin="agent",
        timeout_s=90.0,
    )


def recall_session_tool(system: MemorySystem) -> Tool:
    """`recall_session`: excerpts of one past session around a query."""

    async def recall_session(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            return await system.recall_session(str(args["session"]), str(args["query"]))
        except RecallError as exc:
            raise ToolError(str(exc)) from None

    return Tool(
        name="recall_session",
        description="Read excerpts of one past session's transcript around a query, with message ids and times.",
        input_schema=RECALL_SESSION_SCHEMA,
        handler=recall_session,
        output_origin="agent",
        timeout_s=30.0,
    )


def remember_session_tool(system: MemorySystem) -> Tool:
    """`remember_session`: summarise the current session into memory now."""

    async def remember_session(ctx: ToolContext, args: dict[str, Any]) -> str:
        try:
            path = await system.summarise_session(ctx.session_id, wait=True)
        except ModelError as exc:
            raise ToolError(
                f"the summariser model is unavailable ({exc}); the session will be summarised later"
            ) from None
        if path is None:
            raise ToolError("this session has no messages to summarise yet")
        return f"session summarised: {path.name}"

    return Tool(
        name="remember_session",
        description="Summarise the current session into memory now; returns the summary's file name.",
        input_schema=REMEMBER_SESSION_SCHEMA,
        handler=remember_session,
        output_origin=None,
        timeout_s=110.0,
    )
