"""The sleep cycle: wind down, run the phases in order, wake up, checkpointing every step.

Order: `wind_down` (the trunk finishes its turn and holds; messages keep being accepted and
fsynced) → the phases given to the cycle (maintenance and dreams, then `wake_up`) → release.
The lifecycle goes awake → winding-down → asleep → awake, and its phase names the step for
`status`. `SleepStarted` is published before the first step, one log line per step and one
`JournalNote` per step that changed something (a report with `nothing_changed` logs only), then
`SleepFinished` and `Woke`. Each phase's `since` is the end of the last cycle in which that
phase completed, so a deferred phase reaches back over the cycle that deferred it.

Robustness:
- every step's outcome is a row in `sleep_phases`; a crash or SIGTERM mid-cycle leaves the
  cycle `running`, and the next start holds the trunk before it answers anything and resumes
  at the first step without a final row: a completed step is never run twice;
- a step that raises is retried with backoff on the injectable clock (`sleep.phase_retries`,
  counting attempts made before a restart too), then skipped with a journal note, and the
  rest proceeds; `SpendCapReached` skips at once (the cap applies);
- a person's message accepted before the cycle asks for the hold is answered before sleeping
  (in the old session) and does not wake the agent early;
- a person's message during sleep (once the hold is asked for) wakes the agent early: the
  optional step in progress is cancelled (phases are safe to re-run) and the remaining
  optional ones are deferred to the next cycle; the wake-up still runs, the state frame says what happened, the first reply
  is told, and the message — already on disk in the inbox — is answered in the new session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from daemon.agent.gateway import CommandBusy
from daemon.agent.trunk import SwitchVetoed
from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.errors import ReverieError
from daemon.events import (
    BeforeAgentStart,
    CompactionApproaching,
    JournalNote,
    MessageAccepted,
    SleepFinished,
    SleepStarted,
    TurnFinished,
    Woke,
)
from daemon.lifecycle import DaemonState, Lifecycle
from daemon.log import bound_contextvars, get_logger
from daemon.models.base import ModelError, SpendCapReached
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import Settings
from daemon.sleep.checkpoints import (
    FINAL,
    Checkpoints,
    CycleRecord,
    PhaseRecord,
    PhaseStatus,
    cycle_json,
)
from daemon.sleep.commands import (
    CycleResult,
    SleepRequest,
    SleepResult,
    SwitchRequest,
    SwitchResult,
)
from daemon.sleep.phases import Phase, PhaseContext, PhaseReport
from daemon.sleep.wake import WakeNote, WakeUp
from daemon.sleep.winddown import WindDown
from daemon.store.db import Database
from daemon.tokens import default_counter

if TYPE_CHECKING:
    from daemon.agent.trunk import Trunk
    from daemon.memory.system import MemorySystem
    from daemon.scheduler import Scheduler

log = get_logger("sleep")

WIND_DOWN = "wind_down"


class SleepBusy(ReverieError):
    """A cycle cannot start now (one is running, or the daemon is stopping); the message says why."""


@dataclass(kw_only=True)
class CycleOutcome:
    """What one cycle did, step by step."""

    cycle_id: str
    reason: str
    old_session_id: str
    new_session_id: str | None
    woke_early: bool
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    # How many changes of each kind the cycle's change set holds (`reverie sleep show ID`).
    changes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> CycleResult:
        return {
            "cycle_id": self.cycle_id,
            "reason": self.reason,
            "old_session_id": self.old_session_id,
            "new_session_id": self.new_session_id,
            "woke_early": self.woke_early,
            "deferred": self.deferred,
            "steps": self.steps,
            "changes": self.changes,
        }


class SleepCycle:
    """Owns the sleep cycle: its checkpoints, its task group, its hooks and its nightly job.

    `async with SleepCycle(...) as cycle:` (after the trunk is entered, before it serves) then
    `await tg.start(cycle.serve)`. `phases` are the steps between wind-down and release, in
    order; by default only the wake-up.
    """

    def __init__(
        self,
        *,
        home: Home,
        settings: Settings,
        db: Database,
        models: ModelRoles,
        bus: EventBus,
        clock: Clock,
        memory: MemorySystem,
        trunk: Trunk,
        lifecycle: Lifecycle,
        phases: Sequence[Phase] | None = None,
    ) -> None:
        self.home = home
        self.settings = settings
        self.db = db
        self.models = models
        self.bus = bus
        self.clock = clock
        self.memory = memory
        self.trunk = trunk
        self.lifecycle = lifecycle
        self.phases: list[Phase] = list(phases) if phases is not None else [WakeUp(trunk)]
        names = [WIND_DOWN, *(p.name for p in self.phases)]
        if len(set(names)) != len(names):
            raise ValueError(f"sleep phase names must be unique, got {names}")
        self.checkpoints = Checkpoints(db)
        self.wake_note = WakeNote()
        self.wind_down = WindDown(
            settings=settings, lifecycle=lifecycle, trunk=trunk, start=self._start_from_wind_down
        )
        self.running: CycleRecord | None = None
        self.last: CycleOutcome | None = None
        self._resume: CycleRecord | None = None
        self._held = False
        # Set when the cycle asked for the hold: from then on a message waits for the wake-up.
        self._holding = False
        self._woken = anyio.Event()
        self._optional_scope: anyio.CancelScope | None = None
        self._finished: anyio.Event = anyio.Event()
        self._tg: TaskGroup | None = None
        self._serving = anyio.Event()
        self._unsubscribe: list[Callable[[], None]] = []

    # -- ownership ---------------------------------------------------------------------------

    async def __aenter__(self) -> SleepCycle:
        self._resume = await self.checkpoints.unfinished()
        if self._resume is not None:
            # Before the trunk answers anything: messages wait for the resumed wake-up.
            self._holding = True
            await self.trunk.hold()
            self._held = True
            log.info(
                "a sleep cycle was interrupted by a restart; it will resume",
                cycle_id=self._resume.id,
            )
        last = await self.checkpoints.last_finished()
        if (
            last is not None
            and last.new_session_id
            and self.trunk.session
            and last.new_session_id == self.trunk.session.id
        ):
            self.wake_note.arm(
                last.new_session_id,
                reason=last.reason,
                woke_early=last.woke_early,
                deferred=last.deferred,
            )
        self.register(self.bus)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for undo in self._unsubscribe:
            undo()
        self._unsubscribe.clear()
        self._release()

    def register(self, bus: EventBus) -> None:
        """The wind-down on `compaction_approaching` and `turn_finished`; an early wake on
        `message_accepted`; the notes appended after the assembled context."""
        self._unsubscribe += [
            bus.on(CompactionApproaching, self.wind_down.on_compaction, name="sleep.wind_down"),
            bus.on(TurnFinished, self.wind_down.on_turn_finished, name="sleep.wind_down_turn_end"),
            bus.on(MessageAccepted, self.message_arrived, name="sleep.wake_early"),
            bus.on(
                BeforeAgentStart,
                self.wind_down.on_before_agent_start,
                priority=950,
                name="sleep.tired_note",
            ),
            bus.on(
                BeforeAgentStart,
                self.wake_note.on_before_agent_start,
                priority=960,
                name="sleep.wake_note",
            ),
        ]

    def schedule(self, scheduler: Scheduler) -> None:
        """Add the nightly job (`scheduler.nightly_sleep` in the scheduler's zone, with jitter, caught up once)."""
        if not self.settings.sleep.nightly:
            return
        scheduler.add_daily(
            "nightly_sleep",
            self.nightly,
            at=self.settings.scheduler.nightly_sleep,
            jitter_s=self.settings.sleep.jitter_minutes * 60,
            catch_up=True,
        )

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run cycles in this service's task group until cancelled; resume an interrupted one first."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._serving.set()
            task_status.started()
            if self._resume is not None:
                record, self._resume = self._resume, None
                self.running = record
                self._finished = anyio.Event()
                tg.start_soon(self._cycle, record, True, name="sleep-cycle")
            await anyio.sleep_forever()

    # -- starting ----------------------------------------------------------------------------

    async def start(self, reason: str) -> CycleRecord:
        """Begin a cycle in the background and return its record; raise `SleepBusy` if one cannot start."""
        if self._tg is None:
            # Called during start-up (a caught-up nightly run): wait until the service runs.
            await self._serving.wait()
        if self.lifecycle.state is DaemonState.STARTING:
            await self.lifecycle.wait_for(DaemonState.AWAKE, DaemonState.STOPPING)
        if self.running is not None:
            raise SleepBusy(
                f"a sleep cycle is already running ({self.running.id}, phase {self.lifecycle.phase or WIND_DOWN})"
            )
        state = self.lifecycle.state
        if state not in (DaemonState.AWAKE, DaemonState.WINDING_DOWN):
            raise SleepBusy(f"the daemon is {state.value}; a sleep cycle needs it awake")
        assert self.trunk.session is not None
        now = self.clock.now()
        cycle_id = f"sleep-{now.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        # Claimed before the first await, so two starts at once cannot both begin a cycle.
        self.running = CycleRecord(
            id=cycle_id,
            reason=reason,
            session_id=self.trunk.session.id,
            started_at=now,
            status="running",
        )
        try:
            record = await self.checkpoints.begin(
                cycle_id=cycle_id, reason=reason, session_id=self.trunk.session.id, at=now
            )
        except BaseException:
            self.running = None
            raise
        self.running = record
        self._finished = anyio.Event()
        self._woken = anyio.Event()
        self.wind_down.cancel()
        assert self._tg is not None
        self._tg.start_soon(self._cycle, record, False, name="sleep-cycle")
        return record

    async def run(self, reason: str) -> CycleOutcome:
        """Run a whole cycle now and return its outcome (cancellation leaves it to resume later)."""
        record = await self.start(reason)
        return await self.wait(record.id)

    async def wait(self, cycle_id: str) -> CycleOutcome:
        """Wait for the running cycle `cycle_id` to finish; return its outcome."""
        while self.running is not None and self.running.id == cycle_id:
            await self._finished.wait()
        if self.last is None or self.last.cycle_id != cycle_id:
            raise SleepBusy(
                f"sleep cycle {cycle_id} did not finish (the daemon is stopping); it resumes at the next start"
            )
        return self.last

    # -- the person's commands ----------------------------------------------------------------

    async def sleep_command(self, request: SleepRequest) -> SleepResult:
        """`sleep`: start a cycle now; with `wait`, answer with its outcome once it is done."""
        try:
            record = await self.start("manual")
            if request.wait:
                return (await self.wait(record.id)).to_json()
        except SleepBusy as exc:
            raise CommandBusy(str(exc)) from None
        return {
            "cycle_id": record.id,
            "reason": record.reason,
            "started": True,
            "session_id": record.session_id,
        }

    async def switch_command(self, request: SwitchRequest) -> SwitchResult:
        """`switch`: move the trunk to a fresh session, only while awake.

        A wind-down or a sleep is itself on its way to a new session (the wake-up's), so a
        person's switch then is refused rather than raced against it.
        """
        if self.lifecycle.state is not DaemonState.AWAKE:
            raise CommandBusy(
                f"the daemon is {self.lifecycle.state.value}; a session switch needs it awake"
            )
        try:
            done = await self.trunk.switch(request.reason)
        except SwitchVetoed as exc:
            raise CommandBusy(str(exc)) from None
        return {
            "previous_id": done.previous_id,
            "session_id": done.session_id,
            "reason": done.reason,
            "held_s": done.held_s,
        }

    async def nightly(self) -> str:
        """The scheduled job: a cycle unless one ran recently or one is running."""
        last = await self.checkpoints.last_finished()
        gap = timedelta(hours=self.settings.sleep.min_gap_hours)
        if (
            last is not None
            and last.finished_at is not None
            and self.clock.now() - last.finished_at < gap
        ):
            return f"skipped: the last cycle finished at {last.finished_at.isoformat()}"
        try:
            outcome = await self.run("nightly")
        except SleepBusy as exc:
            return f"skipped: {exc}"
        return f"{outcome.cycle_id}: " + ", ".join(
            f"{k} {v['status']}" for k, v in outcome.steps.items()
        )

    async def _start_from_wind_down(self) -> None:
        try:
            await self.start("compaction")
        except SleepBusy as exc:
            log.info("wind-down: the cycle did not start", reason=str(exc))
            if self.running is None:
                self._move(DaemonState.AWAKE, f"wind-down called off: {exc}")

    def message_arrived(self, event: MessageAccepted) -> None:
        """A person's message was accepted: once the trunk is held, it wakes the agent early.

        A message accepted before the cycle asked for the hold (during the wind-down's first
        steps) is answered before sleeping, in the old session, and does not cut the sleep
        short; should the hold still overtake it in the inbox, it waits for the wake-up and
        `_person_waiting` wakes the agent early then.
        """
        if self.running is None or not self._holding or self._woken.is_set():
            return
        self._woken.set()
        if self._optional_scope is not None:
            self._optional_scope.cancel()
        log.info("a message arrived during sleep: waking early", cycle_id=self.running.id)

    def _person_waiting(self) -> bool:
        return any(e.origin == "person" for e in self.trunk.inbox.pending())

    def _release(self) -> None:
        self._holding = False
        if self._held:
            self._held = False
            self.trunk.release()

    # -- the cycle ---------------------------------------------------------------------------

    def _move(self, target: DaemonState, detail: str) -> None:
        if self.lifecycle.state is not target and self.lifecycle.can(target):
            self.lifecycle.transition(target, detail=detail)

    async def _cycle(self, record: CycleRecord, resumed: bool) -> None:
        outcome = CycleOutcome(
            cycle_id=record.id,
            reason=record.reason,
            old_session_id=record.session_id,
            new_session_id=None,
            woke_early=False,
        )
        try:
            with bound_contextvars(cycle_id=record.id):
                # Its phases fit digests and notes to token budgets: exact counts (a cycle
                # before any turn loads the vocabulary here, in a thread).
                await default_counter().loaded()
                await self._steps(record, resumed, outcome)
        except Exception as exc:
            log.error("the sleep cycle failed", error=repr(exc), exc_info=True)
            with anyio.CancelScope(shield=True):
                try:
                    await self.checkpoints.finish(
                        record.id,
                        at=self.clock.now(),
                        status=PhaseStatus.FAILED,
                        new_session_id=None,
                        woke_early=False,
                        deferred=[],
                    )
                except (
                    Exception
                ) as err:  # the store itself is failing; the next start resumes the cycle
                    log.error("could not record the failed cycle", error=repr(err))
            self._move(DaemonState.AWAKE, f"the sleep cycle failed ({exc}); see the log")
        finally:
            self._release()
            self.running = None
            self._optional_scope = None
            self._finished.set()

    async def _steps(self, record: CycleRecord, resumed: bool, outcome: CycleOutcome) -> None:
        if resumed:
            await self.checkpoints.mark_resumed(record.id)
            if self.lifecycle.state is DaemonState.STARTING:
                await self.lifecycle.wait_for(DaemonState.AWAKE, DaemonState.STOPPING)
            if self._person_waiting():
                self._woken.set()
        done = await self.checkpoints.phases(record.id)
        if not resumed or WIND_DOWN not in done:
            await self.bus.publish(SleepStarted(reason=record.reason, session_id=record.session_id))
        self._move(
            DaemonState.WINDING_DOWN,
            f"going to sleep ({record.reason})" + (": resuming after a restart" if resumed else ""),
        )
        self.lifecycle.set_phase(WIND_DOWN)
        last = await self.checkpoints.last_finished()
        ctx = PhaseContext(
            cycle_id=record.id,
            reason=record.reason,
            session_id=record.session_id,
            started_at=record.started_at,
            since=last.finished_at if last else None,
            home=self.home,
            settings=self.settings,
            db=self.db,
            models=self.models,
            bus=self.bus,
            clock=self.clock,
            memory=self.memory,
            earlier={name: rec.report for name, rec in done.items() if rec.report is not None},
        )
        await self._wind_down(record, ctx, done, outcome)
        self._move(DaemonState.ASLEEP, f"asleep ({record.reason})")
        await self._phases(record, ctx, done, outcome)
        await self._wake(record, outcome)

    async def _wind_down(
        self,
        record: CycleRecord,
        ctx: PhaseContext,
        done: dict[str, PhaseRecord],
        outcome: CycleOutcome,
    ) -> None:
        """Hold the trunk (again, after a restart) and summarise the day, checkpointed once."""
        # Wind-down: always hold again (a restart forgets holds); checkpoint it once.
        wound_down = WIND_DOWN in done and done[WIND_DOWN].status in FINAL
        if not wound_down:
            await self.checkpoints.phase_started(record.id, WIND_DOWN, 0, self.clock.now())
        if not self._held:
            self._holding = True  # before the await: hold() takes effect at once
            await self.trunk.hold()
            self._held = True
        if wound_down:
            outcome.steps[WIND_DOWN] = {
                "status": done[WIND_DOWN].status,
                "changed": "(done before a restart)",
            }
        else:
            waiting = len(self.trunk.inbox.pending())
            summary = await self._summarise_day(record.session_id)
            report = PhaseReport(
                phase=WIND_DOWN,
                changed=f"the turn in progress finished; trunk {record.session_id} held"
                + (f"; the day summarised ({Path(summary).name})" if summary else "")
                + (f"; {waiting} message(s) wait for the wake-up" if waiting else ""),
                details={"waiting": waiting, "summary_file": summary},
                files=(summary,) if summary else (),
                nothing_changed=not summary and not waiting,
            )
            await self._complete(ctx, 0, report, outcome)

    async def _phases(
        self,
        record: CycleRecord,
        ctx: PhaseContext,
        done: dict[str, PhaseRecord],
        outcome: CycleOutcome,
    ) -> None:
        """Run the phases not finished before a restart; defer optional ones a person waits on."""
        for seq, phase in enumerate(self.phases, start=1):
            prior = done.get(phase.name)
            if prior is not None and prior.status in FINAL:
                log.info(
                    "sleep phase already completed before a restart; not repeated",
                    phase=phase.name,
                    status=prior.status,
                )
                outcome.steps[phase.name] = {
                    "status": prior.status,
                    "changed": "(done before a restart)",
                }
                earlier_new = (
                    prior.report.details.get("new_session_id") if prior.report else None
                ) or None
                if earlier_new:
                    outcome.new_session_id = str(earlier_new)
                if prior.status == PhaseStatus.DEFERRED:
                    outcome.deferred.append(phase.name)
                continue
            self.lifecycle.set_phase(phase.name)
            if phase.optional and (self._woken.is_set() or self._person_waiting()):
                self._woken.set()  # a message waits for the wake-up: the agent wakes early
                await self._defer(ctx, seq, phase.name, outcome)
                continue
            attempts_before = prior.attempts if prior is not None else 0
            # Each phase's material reaches back to the last cycle in which it completed.
            since = await self.checkpoints.completed_since(phase.name, before=record.id)
            await self._run_phase(replace(ctx, since=since), seq, phase, outcome, attempts_before)
            ran = outcome.steps[phase.name].get("report")
            if isinstance(ran, dict) and ran.get("details", {}).get("new_session_id"):
                outcome.new_session_id = str(ran["details"]["new_session_id"])

    async def _wake(self, record: CycleRecord, outcome: CycleOutcome) -> None:
        """Record the finished cycle, arm the wake note, release the trunk, tell the bus."""
        # The change set's reader (and the dream revisions under it) waits for the first
        # cycle's end, not the daemon's start.
        from daemon.sleep.changes import change_counts

        outcome.woke_early = self._woken.is_set()
        outcome.changes = (await change_counts(self.db, [record.id])).get(record.id, {})
        new_id = outcome.new_session_id or (self.trunk.session.id if self.trunk.session else None)
        await self.checkpoints.finish(
            record.id,
            at=self.clock.now(),
            status=PhaseStatus.DONE,
            new_session_id=outcome.new_session_id,
            woke_early=outcome.woke_early,
            deferred=outcome.deferred,
        )
        if outcome.new_session_id:
            self.wake_note.arm(
                outcome.new_session_id,
                reason=record.reason,
                woke_early=outcome.woke_early,
                deferred=outcome.deferred,
            )
        detail = "rested"
        if outcome.woke_early:
            detail = "woke early for your message" + (
                f"; deferred to the next sleep: {', '.join(outcome.deferred)}"
                if outcome.deferred
                else ""
            )
        self.lifecycle.set_phase(None)
        self._release()
        self._move(DaemonState.AWAKE, detail)
        self.last = outcome
        log.info(
            "sleep cycle finished",
            reason=record.reason,
            old_session_id=record.session_id,
            new_session_id=new_id,
            woke_early=outcome.woke_early,
            deferred=outcome.deferred,
            steps={k: v["status"] for k, v in outcome.steps.items()},
            changes=outcome.changes,
        )
        await self.bus.publish(
            SleepFinished(
                reason=record.reason, old_session_id=record.session_id, new_session_id=new_id or ""
            )
        )
        await self.bus.publish(Woke(session_id=new_id or ""))

    async def _summarise_day(self, session_id: str) -> str:
        """Summarise the day's session now, so maintenance and dreams see it (the wake-up reuses it)."""
        try:
            path = await self.memory.summarise_session(session_id, wait=True)
        except ModelError as exc:
            log.warning(
                "wind-down: the day could not be summarised yet; the wake-up tries again",
                error=str(exc),
            )
            return ""
        return str(path) if path else ""

    async def _run_phase(
        self, ctx: PhaseContext, seq: int, phase: Phase, outcome: CycleOutcome, attempts_before: int
    ) -> None:
        cfg = self.settings.sleep
        allowed = cfg.phase_retries + 1
        attempts = attempts_before
        error = ""
        while attempts < allowed:
            attempts = await self.checkpoints.phase_started(
                ctx.cycle_id, phase.name, seq, self.clock.now()
            )
            scope = anyio.CancelScope()
            if phase.optional:
                self._optional_scope = scope
                if self._woken.is_set():
                    scope.cancel()  # a message came while this attempt was being recorded
            try:
                with scope:
                    report = await phase.run(ctx)
            except SpendCapReached as exc:
                await self._skip(
                    ctx, seq, phase.name, f"the daily spend cap applies: {exc}", attempts, outcome
                )
                return
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                await self.checkpoints.phase_error(ctx.cycle_id, phase.name, error)
                log.warning(
                    "sleep phase failed",
                    phase=phase.name,
                    attempt=attempts,
                    of=allowed,
                    error=error,
                )
                if attempts < allowed:
                    delay = min(cfg.retry_max_s, cfg.retry_base_s * 2 ** (attempts - 1))
                    await self.clock.sleep(delay)
                continue
            finally:
                self._optional_scope = None
            if scope.cancelled_caught:
                await self._defer(ctx, seq, phase.name, outcome)
                return
            if report.phase != phase.name:
                report.phase = phase.name
            await self._complete(ctx, seq, report, outcome, attempts=attempts)
            return
        await self._skip(ctx, seq, phase.name, error or "no attempts left", attempts, outcome)

    async def _complete(
        self,
        ctx: PhaseContext,
        seq: int,
        report: PhaseReport,
        outcome: CycleOutcome,
        *,
        attempts: int = 1,
    ) -> None:
        await self.checkpoints.phase_finished(
            ctx.cycle_id,
            report.phase,
            seq,
            status=PhaseStatus.DONE,
            at=self.clock.now(),
            report=report,
        )
        ctx.earlier[report.phase] = report
        outcome.steps[report.phase] = {
            "status": PhaseStatus.DONE,
            "changed": report.changed,
            "report": report.to_json(),
        }
        log.info(
            "sleep phase finished",
            phase=report.phase,
            changed=report.changed,
            attempts=attempts,
            nothing_changed=report.nothing_changed,
        )
        if report.nothing_changed:
            return  # the log line is enough: an idle phase does not crowd the journal
        await self.bus.publish(
            JournalNote(
                summary=f"sleep · {report.phase}: {report.changed}",
                tags=("sleep", report.phase),
                session_id=ctx.session_id,
                files_touched=report.files,
            )
        )

    async def _skip(
        self,
        ctx: PhaseContext,
        seq: int,
        name: str,
        error: str,
        attempts: int,
        outcome: CycleOutcome,
    ) -> None:
        await self.checkpoints.phase_finished(
            ctx.cycle_id, name, seq, status=PhaseStatus.SKIPPED, at=self.clock.now(), error=error
        )
        outcome.steps[name] = {
            "status": PhaseStatus.SKIPPED,
            "changed": f"skipped after {attempts} attempt(s): {error}",
        }
        log.warning("sleep phase skipped", phase=name, attempts=attempts, error=error)
        await self.bus.publish(
            JournalNote(
                summary=f"sleep · {name} skipped after {attempts} attempt(s): {error}",
                tags=("sleep", name, "skipped"),
                session_id=ctx.session_id,
                open_questions=(f"why did the {name} phase fail? ({error})",),
            )
        )

    async def _defer(self, ctx: PhaseContext, seq: int, name: str, outcome: CycleOutcome) -> None:
        await self.checkpoints.phase_finished(
            ctx.cycle_id, name, seq, status=PhaseStatus.DEFERRED, at=self.clock.now()
        )
        outcome.steps[name] = {
            "status": PhaseStatus.DEFERRED,
            "changed": "deferred to the next sleep: a message woke the agent early",
        }
        outcome.deferred.append(name)
        log.info("sleep phase deferred: woken early", phase=name)
        await self.bus.publish(
            JournalNote(
                summary=f"sleep · {name} deferred to the next sleep: a message woke me early",
                tags=("sleep", name, "deferred"),
                session_id=ctx.session_id,
            )
        )

    # -- reading -----------------------------------------------------------------------------

    async def describe(self) -> dict[str, Any]:
        """The running cycle and the last finished one, for `status`."""
        last = await self.checkpoints.last_finished()
        running = self.running
        return {
            "running": {
                "cycle_id": running.id,
                "reason": running.reason,
                "phase": self.lifecycle.phase,
            }
            if running
            else None,
            "last": cycle_json(last) if last else None,
            "wind_down": self.wind_down.describe(),
        }
