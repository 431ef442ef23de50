"""The daemon's events: frozen, keyword-only, one class per hook.

A hook's error policy and timeout are part of its definition (`HOOKS`): *gates* run their
handlers in order and any handler may veto or contribute (by returning a value);
*observers* run every handler in isolation in the bus's own task group — one failing or slow
handler is logged and the rest still run, and the publisher does not wait for them unless the
hook says it does (`HookSpec.wait`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class HookKind(enum.Enum):
    GATE = "gate"
    OBSERVER = "observer"


@dataclass(frozen=True, kw_only=True)
class Event:
    """Base class of all events."""


@dataclass(frozen=True, kw_only=True)
class Contribution:
    """What a `before_agent_start` handler returns to add a piece to a named layer of the prompt.

    The composer (the context assembler) merges every contribution of the turn into its
    layers, ordered by `priority`, then by the order the handlers ran.
    """

    layer: str
    text: str
    origin: str = "system"
    source: str = ""
    ts: datetime | None = None
    priority: int = 100


@dataclass(frozen=True, kw_only=True)
class SystemNote:
    """What a `before_agent_start` handler returns to add a block after the composed prompt."""

    text: str
    cache_breakpoint: bool = False


@dataclass(frozen=True, kw_only=True)
class TurnContext:
    """One turn's composed system prompt: its blocks, the per-layer report, the active topics."""

    system_blocks: tuple[Any, ...]
    report: Mapping[str, Any] = field(default_factory=dict)
    active_topics: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Composer:
    """What the one composing `before_agent_start` handler returns (the context assembler).

    The handler does its slow work (memory, recall, files) under the hook's timeout and
    returns this; once every handler has run, the agent loop calls `compose` with all the
    turn's `Contribution`s (so a contribution counts whichever handler ran first).
    `compose` is pure and quick; an exception from it fails the turn.
    """

    compose: Callable[[tuple[Contribution, ...]], TurnContext]


@dataclass(frozen=True, kw_only=True)
class BeforeAgentStart(Event):
    """A turn is about to reach the model (gate: may veto, or return what it adds to the context).

    A handler returns a `Contribution` (a piece of a layer), a `SystemNote` (a block after
    the prompt) or — the context assembler alone — the `Composer` that builds the prompt.
    """

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


@dataclass(frozen=True, kw_only=True)
class ForkNote:
    """What a `before_fork` handler returns to add a labelled note to the fork's brief."""

    text: str
    source: str = ""  # the handler's name when empty


@dataclass(frozen=True, kw_only=True)
class BeforeFork(Event):
    """A delegate sub-agent session is about to be spawned (gate: may veto, or return a `ForkNote`)."""

    parent_session_id: str
    parent_transcript_path: str
    fork_session_id: str
    task: str
    depth: int
    context: str = ""


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
class SleepHousekeeping(Event):
    """Sleep maintenance asks other systems for their upkeep (gate: each returns one line of what it changed)."""

    cycle_id: str
    at: datetime


@dataclass(frozen=True, kw_only=True)
class TurnFinished(Event):
    """A trunk turn was answered and its end is on disk (memory indexes it; the wind-down may start sleep)."""

    session_id: str
    turn_id: str
    stop_reason: str
    context_tokens: int = 0
    vetoed: bool = False


@dataclass(frozen=True, kw_only=True)
class ForkFinished(Event):
    """A delegate fork ended (complete, failed or cancelled) and its transcript is closed."""

    fork_session_id: str
    parent_session_id: str
    status: str
    depth: int


@dataclass(frozen=True, kw_only=True)
class MessageAccepted(Event):
    """A person's message was saved to the inbox and acknowledged (a sleeping agent wakes early)."""

    turn_id: str
    queued: int = 0


@dataclass(frozen=True, kw_only=True)
class StateChanged(Event):
    """The daemon's state changed (`starting → awake ⇄ winding-down → asleep → awake → stopping`)."""

    previous: str
    state: str
    at: datetime
    detail: str = ""
    phase: str | None = None


@dataclass(frozen=True, kw_only=True)
class NoticePosted(Event):
    """A notice for the person entered the outbox (the chat side delivers it to their clients)."""

    notice_id: str
    kind: str
    text: str
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class SchedulesChanged(Event):
    """A schedule was added, cancelled, approved or declined: the next due time may have moved.

    `change` is one of "added", "cancelled", "approved", "declined". The schedule keeper
    re-arms its timer; the store waits for it, so the timer is set when the call returns.
    """

    schedule_id: str
    change: str


@dataclass(frozen=True, kw_only=True)
class HookSpec:
    name: str
    event_type: type[Event]
    kind: HookKind
    timeout_s: float
    # Observers only: the publisher waits for every handler, because what they do must be
    # done before it goes on (a journal entry before the session it reads is put to sleep; a
    # heartbeat whose failures the scheduler records).
    wait: bool = False


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
            name="sleep_started",
            event_type=SleepStarted,
            kind=HookKind.OBSERVER,
            timeout_s=5.0,
            wait=True,
        ),
        HookSpec(
            name="sleep_finished", event_type=SleepFinished, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(name="woke", event_type=Woke, kind=HookKind.OBSERVER, timeout_s=5.0),
        HookSpec(
            name="heartbeat",
            event_type=Heartbeat,
            kind=HookKind.OBSERVER,
            timeout_s=30.0,
            wait=True,
        ),
        HookSpec(
            name="journal_note", event_type=JournalNote, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(
            name="config_reloaded", event_type=ConfigReloaded, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        # Upkeep that deletes or rewrites files (a fork transcript's retention) on a quiet night.
        HookSpec(
            name="sleep_housekeeping",
            event_type=SleepHousekeeping,
            kind=HookKind.GATE,
            timeout_s=120.0,
        ),
        # Indexing a turn or a fork embeds its chunks: a model call, bounded but not short.
        HookSpec(
            name="turn_finished", event_type=TurnFinished, kind=HookKind.OBSERVER, timeout_s=120.0
        ),
        HookSpec(
            name="fork_finished", event_type=ForkFinished, kind=HookKind.OBSERVER, timeout_s=120.0
        ),
        HookSpec(
            name="message_accepted",
            event_type=MessageAccepted,
            kind=HookKind.OBSERVER,
            timeout_s=5.0,
        ),
        HookSpec(
            name="state_changed", event_type=StateChanged, kind=HookKind.OBSERVER, timeout_s=5.0
        ),
        HookSpec(
            name="notice_posted", event_type=NoticePosted, kind=HookKind.OBSERVER, timeout_s=10.0
        ),
        # The keeper's re-arm only sets a timer: quick, and done before the store's call returns.
        HookSpec(
            name="schedules_changed",
            event_type=SchedulesChanged,
            kind=HookKind.OBSERVER,
            timeout_s=5.0,
            wait=True,
        ),
    )
}

HOOKS_BY_NAME: dict[str, HookSpec] = {spec.name: spec for spec in HOOKS.values()}
