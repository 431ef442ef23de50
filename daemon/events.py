"""The daemon's events: frozen, keyword-only, one class per hook.

A hook's error policy and timeout are part of its definition (`HOOKS`): *gates* run their
handlers in order and any handler may veto (or contribute to the event's collector);
*observers* run every handler in isolation — one failing or slow handler is logged and the
rest still run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class HookKind(enum.Enum):
    GATE = "gate"
    OBSERVER = "observer"


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base class of all events."""


@dataclass(kw_only=True)
class Contribution:
    """A piece of context a handler adds to a named layer of the system prompt."""

    layer: str
    text: str
    origin: str = "system"
    source: str = ""
    ts: datetime | None = None
    priority: int = 100


@dataclass(kw_only=True)
class TurnContext:
    """What `before_agent_start` handlers build together for one turn.

    Handlers append `contributions`; the context assembler (itself a handler) turns them and
    its own layers into `system_blocks`, and records the per-layer breakdown in `report`.
    """

    contributions: list[Contribution] = field(default_factory=list)
    system_blocks: list[Any] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    active_topics: list[str] = field(default_factory=list)

    def contribute(self, layer: str, text: str, **kwargs: Any) -> None:
        self.contributions.append(Contribution(layer=layer, text=text, **kwargs))


@dataclass(frozen=True, kw_only=True)
class BeforeAgentStart(Event):
    """A turn is about to reach the model (gate: contribute context, or veto the turn)."""

    session_id: str
    turn_id: str
    prompt: str
    previous_reply: str = ""
    session_kind: str = "trunk"  # trunk | fork
    # Transcript message ids of this session the request replays (this turn's included): what
    # the model already sees, so automatic recall does not bring it back.
    replayed_message_ids: frozenset[str] = frozenset()
    # Sessions whose memories must not enter this turn's context (a fork's ancestors and the
    # forks running beside it: a fork sees its brief, never the trunk's live conversation).
    exclude_sessions: tuple[str, ...] = ()
    context: TurnContext = field(default_factory=TurnContext)


@dataclass(frozen=True, kw_only=True)
class SessionShutdown(Event):
    """A session is ending: the daemon is stopping, or the session was closed."""

    session_id: str
    transcript_path: str
    reason: str = "shutdown"


@dataclass(frozen=True, kw_only=True)
class SessionBeforeSwitch(Event):
    """The trunk is about to switch to a new session (gate: may veto the switch)."""

    session_id: str
    transcript_path: str
    reason: str = "switch"


@dataclass(kw_only=True)
class ForkBrief:
    """What `before_fork` handlers add to a fork's brief (each addition is one labelled note)."""

    additions: list[tuple[str, str]] = field(default_factory=list)

    def add(self, text: str, *, source: str) -> None:
        if text.strip():
            self.additions.append((source, text.strip()))


@dataclass(frozen=True, kw_only=True)
class BeforeFork(Event):
    """A delegate sub-agent session is about to be spawned (gate: may veto or add to the brief)."""

    parent_session_id: str
    parent_transcript_path: str
    fork_session_id: str
    task: str
    depth: int
    context: str = ""
    brief: ForkBrief = field(default_factory=ForkBrief)


@dataclass(frozen=True, kw_only=True)
class CompactionApproaching(Event):
    """The trunk's live context crossed the configured fraction of the model's window."""

    session_id: str
    used_tokens: int
    window_tokens: int
    fraction: float


@dataclass(frozen=True, kw_only=True)
class SleepStarted(Event):
    reason: str
    session_id: str


@dataclass(frozen=True, kw_only=True)
class SleepFinished(Event):
    reason: str
    old_session_id: str
    new_session_id: str


@dataclass(frozen=True, kw_only=True)
class Woke(Event):
    session_id: str


@dataclass(frozen=True, kw_only=True)
class Heartbeat(Event):
    at: datetime


@dataclass(frozen=True, kw_only=True)
class JournalNote(Event):
    """A system (a sleep phase, a fork tree) reports what it changed, for the journal to record.

    The journal writes it as an entry of its own (no model call): `summary` is one line,
    `tags` name the source (e.g. ``("sleep", "maintenance")``).
    """

    summary: str
    tags: tuple[str, ...] = ()
    session_id: str = ""
    decisions: tuple[str, ...] = ()
    progress: tuple[str, ...] = ()
    open_questions: tuple[str, ...] = ()
    files_touched: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ConfigReloaded(Event):
    paths: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class HookSpec:
    name: str
    event_type: type[Event]
    kind: HookKind
    timeout_s: float


HOOKS: dict[type[Event], HookSpec] = {
    spec.event_type: spec
    for spec in (
        HookSpec(
            name="before_agent_start",
            event_type=BeforeAgentStart,
            kind=HookKind.GATE,
            timeout_s=10.0,
        ),
        HookSpec(
            name="session_shutdown",
            event_type=SessionShutdown,
            kind=HookKind.OBSERVER,
            timeout_s=5.0,
        ),
        HookSpec(
            name="session_before_switch",
            event_type=SessionBeforeSwitch,
            kind=HookKind.GATE,
            timeout_s=10.0,
        ),
        HookSpec(name="before_fork", event_type=BeforeFork, kind=HookKind.GATE, timeout_s=5.0),
        HookSpec(
            name="compaction_approaching",
            event_type=CompactionApproaching,
            kind=HookKind.OBSERVER,
            timeout_s=5.0,
        ),
        HookSpec(
            name="sleep_started", event_type=SleepStarted, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(
            name="sleep_finished", event_type=SleepFinished, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(name="woke", event_type=Woke, kind=HookKind.OBSERVER, timeout_s=5.0),
        HookSpec(name="heartbeat", event_type=Heartbeat, kind=HookKind.OBSERVER, timeout_s=30.0),
        HookSpec(
            name="journal_note", event_type=JournalNote, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(
            name="config_reloaded", event_type=ConfigReloaded, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
    )
}

HOOKS_BY_NAME: dict[str, HookSpec] = {spec.name: spec for spec in HOOKS.values()}
