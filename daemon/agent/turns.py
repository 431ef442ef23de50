"""What a running turn reports to whoever listens: typed, frozen events.

The agent loop (trunk or fork) reports `Delta`, `ToolPhase`, `TurnDone` and `TurnFailed` to a
`TurnObserver`; only the chat gateway turns them into wire frames (through
`daemon.chat.protocol`, where every error code is defined). A turn with no listener still
runs and lands on disk; an observer must never block (the chat server queues per client).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from daemon.chat.protocol import ErrorCode

Phase: TypeAlias = Literal["started", "progress", "finished"]


@dataclass(frozen=True, kw_only=True)
class Delta:
    """A piece of the reply's text, as the model streams it."""

    turn_id: str
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolPhase:
    """A tool started, reported progress or finished (delegate forks report through it too).

    `depth` is the nesting of the session that runs the tool (0 for the trunk); `fork_id`
    names the fork session a `delegate` call spawned, when there is one.
    """

    turn_id: str
    name: str
    phase: Phase
    is_error: bool | None = None
    detail: str | None = None
    depth: int = 0
    fork_id: str | None = None
    # On `started`: the call in one line (`run: git status`), bounded and secrets masked.
    summary: str | None = None


@dataclass(frozen=True, kw_only=True)
class TurnDone:
    turn_id: str
    text: str
    stop_reason: str
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TurnFailed:
    """The turn ended without a reply; `code` is one of `ErrorCode`."""

    turn_id: str
    code: ErrorCode
    message: str


TurnEvent: TypeAlias = Delta | ToolPhase | TurnDone | TurnFailed
TurnObserver = Callable[[TurnEvent], None]


def ignore(_event: TurnEvent) -> None:
    """The observer of a turn nobody is listening to."""
    return None
