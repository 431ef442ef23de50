"""What a sleep phase is given and what it reports: the contract between the cycle and its phases.

The cycle (`daemon.sleep.cycle`) runs phases in order and checkpoints each one's report in
the database; after a crash it resumes at the first phase without a checkpoint. A phase must
therefore be safe to run again from the start when it was interrupted before its checkpoint:
it writes files atomically (temp, fsync, rename) and database rows in one transaction, keyed
so a second run finds its own earlier work instead of duplicating it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from daemon.bus import EventBus
    from daemon.clock import Clock
    from daemon.memory.system import MemorySystem
    from daemon.models.roles import ModelRoles
    from daemon.paths import Home
    from daemon.settings import Settings
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class PhaseContext:
    """Everything one phase of one cycle may use."""

    cycle_id: str
    reason: str  # nightly | compaction | manual
    session_id: str  # the trunk session being put to sleep
    started_at: datetime
    # This phase's material starts here: the end of the last cycle in which *this phase* ran
    # to completion (None if it never did), so a deferred or skipped phase reaches back over
    # the cycles that did not run it and loses nothing.
    since: datetime | None
    home: Home
    settings: Settings
    db: Database
    models: ModelRoles
    bus: EventBus
    clock: Clock
    memory: MemorySystem
    # Reports of the phases already completed in this cycle, by phase name (survive a crash).
    earlier: dict[str, PhaseReport] = field(default_factory=dict)


@dataclass(kw_only=True)
class PhaseReport:
    """What a phase changed: one line for the log and the journal, details for tests and status."""

    phase: str
    changed: str
    details: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    # True when the phase found nothing to do and changed nothing: the cycle still writes its
    # log line but publishes no journal note (idle nights must not crowd the journal).
    nothing_changed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "changed": self.changed,
            "details": self.details,
            "files": list(self.files),
            "nothing_changed": self.nothing_changed,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PhaseReport:
        return cls(
            phase=data["phase"],
            changed=data.get("changed", ""),
            details=dict(data.get("details") or {}),
            files=tuple(data.get("files") or ()),
            nothing_changed=bool(data.get("nothing_changed", False)),
        )


class Phase(Protocol):
    """One step of the sleep cycle."""

    name: str
    # An optional phase is deferred to the next cycle when a message wakes the agent early.
    optional: bool

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        """Do the phase's work; raise to have the cycle retry it with backoff, then skip it."""
        ...


class DeferredPhase:
    """A phase whose code is imported when a cycle first runs it, not when the daemon starts.

    The cycle needs only a phase's `name` and `optional` until it runs the phase; `load`
    imports and builds the phase itself at its first `run` (a night, or `reverie sleep`), and
    the phase it builds is kept for every later run. The declared name and optionality must be
    the built phase's: a mismatch raises at that first run (the cycle retries, then skips the
    phase, as for any phase that raises) rather than checkpointing under the wrong name.
    """

    def __init__(self, name: str, *, optional: bool, load: Callable[[], Phase]) -> None:
        self.name = name
        self.optional = optional
        self._load = load
        self._phase: Phase | None = None

    @property
    def loaded(self) -> Phase:
        """The phase itself, imported and built at the first use."""
        if self._phase is None:
            phase = self._load()
            if (phase.name, phase.optional) != (self.name, self.optional):
                raise TypeError(
                    f"deferred sleep phase {self.name!r} (optional={self.optional}) loaded "
                    f"{phase.name!r} (optional={phase.optional})"
                )
            self._phase = phase
        return self._phase

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        return await self.loaded.run(ctx)
