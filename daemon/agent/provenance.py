"""Whose word a turn acts on: the origin given to what the model stores while it runs.

A fact the model stores is only as trustworthy as the text it had read when it decided to
store it. A trunk turn starts as the person's word; a fork's turn as the agent's (its brief
is the delegating model's, never the person's). Reading weakens it, never strengthens it:

- a tool result of this turn gives the tool's `output_origin` (outside text: "tool"; the
  agent's own memory: "agent"; a receipt such as `remember`'s: nothing);
- a tool result replayed from an earlier turn, or untrusted memory shown in the system
  prompt, gives "agent": the person has spoken since, but that text is still in view.

So a page that talks the model into `remember` yields a "tool" fact, refused by the profile
and never pinned; the person's own request in a clean turn yields a "person" fact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from daemon.memory.api import UNTRUSTED_ORIGINS
from daemon.models.base import Message, ToolResultBlock, ToolUseBlock

# Weakest last: a turn's origin is the weakest of everything it has read.
STRENGTH: tuple[str, ...] = ("person", "agent", "tool")


def weakest(*origins: str | None) -> str:
    """The least trusted of `origins` (None adds nothing; an unknown origin counts as "tool")."""
    rank = max(
        (STRENGTH.index(o) if o in STRENGTH else len(STRENGTH) - 1 for o in origins if o),
        default=0,
    )
    return STRENGTH[rank]


def turn_origin(
    *,
    session_kind: str,
    history: Sequence[Message],
    current: Sequence[Message],
    shown_origins: Iterable[str],
    output_origin: Callable[[str], str | None],
) -> str:
    """The origin of what the model stores after reading `history` + `current` (one request).

    `shown_origins` are the origins of the memory in the system prompt; `output_origin(name)`
    says what a tool's output brings in.
    """
    found = ["person" if session_kind == "trunk" else "agent"]
    if any(o in UNTRUSTED_ORIGINS for o in shown_origins):
        found.append("agent")
    for messages, earlier in ((history, True), (current, False)):
        names = {b.id: b.name for m in messages for b in m.content if isinstance(b, ToolUseBlock)}
        for m in messages:
            for b in m.content:
                if not isinstance(b, ToolResultBlock):
                    continue
                # A call whose name is gone (the replay was cut) brought unknown text: outside.
                brought = output_origin(names[b.tool_use_id]) if b.tool_use_id in names else "tool"
                if brought is not None:
                    found.append("agent" if earlier else brought)
    return weakest(*found)
