"""The offline model's part in delegation: a fork with no key still does something useful.

Inside a fork (task "delegate") it looks up what memory holds on the objective (`recall`),
then ends the fork with `task_complete`: an extractive report of the brief and what memory
returned, outcome `partial`, and a plain statement that no language model did the work.
In the trunk's chat, "delegate: …" / "please delegate …" calls `delegate` with that task, so
delegation can be tried (and tested) end to end with no key.
"""

from __future__ import annotations

import re
from typing import Any

from daemon.models.base import Message, ModelRequest, ToolResultBlock, ToolUseBlock

_OBJECTIVE = re.compile(r"Your objective is: (?P<x>.+)")
_ASKED = re.compile(
    r"(?:^|[.!?]\s+)(?:(?:please|can you|could you|ok|okay)[, ]+)*(?:delegate|hand off)(?: the task)?(?: of)?\s*[:,-]?\s+(?P<x>.+)",
    re.IGNORECASE | re.DOTALL,
)
_BRIEF_CHARS = 600
_RESULT_CHARS = 1200

Plan = tuple[str, list[tuple[str, dict[str, Any]]]]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _tool_results(message: Message | None) -> list[ToolResultBlock]:
    if message is None or message.role != "user":
        return []
    return [b for b in message.content if isinstance(b, ToolResultBlock)]


def respond(request: ModelRequest) -> Plan | None:
    """The offline reply for a fork step or a chat message asking to delegate; None otherwise."""
    if request.task == "delegate":
        return fork_step(request)
    if request.task == "chat":
        return chat_delegation(request)
    return None


def chat_delegation(request: ModelRequest) -> Plan | None:
    """`delegate(task)` when the person's message plainly asks for it and the tool is offered."""
    last = request.messages[-1] if request.messages else None
    if last is None or last.role != "user" or _tool_results(last):
        return None
    if "delegate" not in {t.name for t in request.tools}:
        return None
    asked = _ASKED.search(last.text.strip())
    if not asked:
        return None
    task = _clip(asked["x"].strip(" .!\"'"), 300)
    return ("", [("delegate", {"task": task, "context": _clip(last.text, 2000)})]) if task else None


def fork_step(request: ModelRequest) -> Plan | None:
    """Recall on the objective, then report through `task_complete`; None without a fork brief."""
    brief = request.messages[0].text if request.messages else ""
    found = _OBJECTIVE.search(brief)
    if not found:
        return None  # not a fork's brief: the generic offline extract answers
    objective = found["x"].strip()
    offered = {t.name for t in request.tools}
    last = request.messages[-1] if request.messages else None
    results = _tool_results(last)
    if not results and "recall" in offered and objective:
        return "", [("recall", {"query": objective})]
    names = {
        b.id: b.name for m in request.messages for b in m.content if isinstance(b, ToolUseBlock)
    }
    found_text = " ".join(
        f"{names.get(r.tool_use_id, 'tool')}{' (error)' if r.is_error else ''}: {_clip(r.content, _RESULT_CHARS)}"
        for r in results
    )
    context = brief.partition("## Brief")[2].split("\n## ", 1)[0].strip()
    summary = (
        "Offline model: no language model is configured, so this fork could not reason about the task; "
        f"this is an extract. Objective: {objective}."
        + (f" Brief: {_clip(context, _BRIEF_CHARS)}" if context else "")
        + (f" What memory returned — {found_text}" if found_text else " Memory was not searched.")
    )
    if "task_complete" in offered:
        return "", [("task_complete", {"summary": summary, "outcome": "partial"})]
    return summary, []
