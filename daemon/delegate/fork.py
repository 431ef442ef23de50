"""The delegator: spawns fork sessions for `delegate` calls and returns their digest.

A fork is a session of its own (`sessions/forks/<id>.jsonl`, a `forks` lineage row) run by
its own `AgentLoop` at depth + 1, with the full persona plus `NEUROLOGY.md`, the same memory
tools, a framing line and the brief — never its parent's conversation, and no memory from
its ancestors' live sessions or from the other forks of the trunk's live session.

Spawning goes through the `before_fork` gate (a handler may veto, or add to the brief; the
summariser queues the parent's session so far). Each fork runs inside the parent's tool
call, so cancelling the trunk's turn cancels the whole tree. Limits, per fork tree (one
trunk `delegate` call and every fork under it): an inactivity timeout per fork (model output
and tool activity, its children's included, keep it alive), a hard ceiling on the tree, and
a token budget across the tree. A fork a limit stops returns what it produced so far, marked
as partial. A fork the daemon died in the middle of is marked failed at the next start and
reported to its parent turn's next `delegate` call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from daemon.agent.loop import AgentLoop, ContextFailed, TurnResult
from daemon.agent.session import Session, new_session_id
from daemon.agent.transcript import Transcript
from daemon.agent.turns import ToolPhase
from daemon.bus import EventBus, Gathered, HookFailed
from daemon.clock import Clock
from daemon.delegate.brief import ForkOutcome, brief_prompt, partial_output
from daemon.delegate.lineage import ForkLineage, ForkRow, ForkStatus
from daemon.delegate.running import ForkRelay, ForkRun, ForkTree
from daemon.delegate.tools import Completion, delegate_tool, task_complete_tool
from daemon.events import BeforeFork, ForkFinished, ForkNote, JournalNote, SessionShutdown
from daemon.log import get_logger
from daemon.models.base import ModelError
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.records import ForkEnd, MessageRecord, TurnEnd, TurnStatus
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.tokens import TokenCounter
from daemon.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

log = get_logger("delegate")

INTERRUPTED = "interrupted: the daemon stopped while this fork was running"


class Delegator:
    """Owns fork runs: the `delegate` tool, spawning, limits, lineage and crash recovery.

    Use as `async with Delegator(...) as delegator:`; entering marks forks a crash left
    `running` as failed (to be reported to their parent turn). `tools_for(depth)` is what a
    session at that depth is offered (`delegate` only below the depth limit).
    """

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        roles: ModelRoles,
        bus: EventBus,
        clock: Clock,
        counter: TokenCounter,
        settings: Settings,
        base_tools: ToolRegistry,
    ) -> None:
        self.home = home
        self.db = db
        self.roles = roles
        self.bus = bus
        self.clock = clock
        self.counter = counter
        self.settings = settings
        self.cfg = settings.delegate
        self.base_tools = base_tools
        self.lineage = ForkLineage(db)
        self._running: dict[str, ForkRun] = {}
        self.forks_started = 0

    async def __aenter__(self) -> Delegator:
        rows = await self.lineage.recover(now=self.clock.now(), reason=INTERRUPTED)
        for row in rows:
            await self._close_interrupted(row)
        if rows:
            log.warning(
                "forks interrupted by a restart marked failed",
                count=len(rows),
                forks=[r.id for r in rows],
            )
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def _close_interrupted(self, row: ForkRow) -> None:
        path = Path(row.transcript_path)
        now = self.clock.now().isoformat()
        if await anyio.Path(path).exists():
            await Transcript(path=path, session_id=row.id).append(
                TurnEnd(turn_id=f"{row.id}-t1", status=TurnStatus.FAILED, error=INTERRUPTED, ts=now)
            )
        await self.lineage.repo.end_session(row.id, now, keep_earlier=True)

    # -- tools ---------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running)

    def delegate_tool(self, parent: ForkRun | None = None) -> Tool:
        async def handler(
            ctx: ToolContext, task: str, context: str, tools: list[str] | None
        ) -> str:
            return await self.delegate(ctx, task, context, parent=parent, tools=tools)

        # The tree's own ceiling returns partial output first; this only backs it up.
        return delegate_tool(handler, timeout_s=self.cfg.tree_timeout_s + 30.0)

    def tools_for(self, depth: int, *, parent: ForkRun | None = None) -> list[Tool]:
        """The delegate tools a session at `depth` is offered (none at the limit or when disabled)."""
        if not self.cfg.enabled or depth >= self.cfg.max_depth:
            return []
        return [self.delegate_tool(parent)]

    def grantable(self, parent: ForkRun | None) -> tuple[str, ...]:
        """The tools a session may grant a fork it starts: the forks' set, or its own grant."""
        if parent is not None:
            return parent.granted
        return tuple(n for n in self.base_tools.names() if n not in ("delegate", "task_complete"))

    def _grant(self, parent: ForkRun | None, asked: list[str] | None) -> tuple[str, ...]:
        grantable = self.grantable(parent)
        if asked is None:
            return grantable
        beyond = [n for n in asked if n not in grantable]
        if beyond:
            raise ToolError(
                f"cannot grant {', '.join(sorted(set(beyond)))}: not a tool you may give a fork "
                f"(you may grant: {', '.join(grantable) or 'none'})"
            )
        return tuple(n for n in grantable if n in asked)

    def _fork_registry(self, run: ForkRun, completion: Completion) -> ToolRegistry:
        registry = self.base_tools.subset(run.granted)
        registry.register(task_complete_tool(completion))
        offered = self.tools_for(run.depth, parent=run)
        for tool in offered:
            registry.register(tool)
        if not offered:
            registry.refuse("delegate", self._refusal(run.depth))
        return registry

    def _refusal(self, depth: int) -> str:
        if not self.cfg.enabled:
            return "delegation is turned off ([delegate] enabled = false); do the work yourself"
        return f"refused: a fork at depth {depth} cannot delegate (the depth limit is {self.cfg.max_depth}); do the work yourself"

    # -- one fork ------------------------------------------------------------------------

    async def delegate(
        self,
        ctx: ToolContext,
        task: str,
        context: str,
        *,
        parent: ForkRun | None = None,
        tools: list[str] | None = None,
    ) -> str:
        """Run a fork for `task` and return its digest (raises `ToolError` when it cannot run or failed).

        Cancellation (the parent's turn was cancelled) cancels the fork, which is recorded as
        `cancelled`, and propagates. A limit stops the fork with its partial output returned.
        """
        depth = ctx.depth + 1
        if not self.cfg.enabled or depth > self.cfg.max_depth:
            raise ToolError(self._refusal(ctx.depth))
        if not task:
            raise ToolError("delegate needs a non-empty task")
        granted = self._grant(parent, tools)
        interrupted = await self.lineage.unreported(ctx.session_id, ctx.turn_id)
        if interrupted:
            # The same turn is being answered again after a restart: say what happened first.
            await self.lineage.mark_reported([r.id for r in interrupted])
            raise ToolError(self._interrupted_report(interrupted))
        now = self.clock.now()
        fork_id = new_session_id("fork", now)
        tree = (
            parent.tree
            if parent is not None
            else ForkTree(
                root_session_id=ctx.session_id,
                deadline=anyio.current_time() + self.cfg.tree_timeout_s,
                token_budget=self.cfg.token_budget,
            )
        )
        path = self.home.forks_dir / f"{fork_id}.jsonl"
        common = dict(
            fork_id=fork_id,
            parent_session_id=ctx.session_id,
            parent_turn_id=ctx.turn_id,
            parent_call_id=ctx.call_id or None,
            root_session_id=tree.root_session_id,
            depth=depth,
            task=task,
            transcript_path=str(path),
            started_at=now,
        )
        gathered = await self._gate(ctx, fork_id, task, context, depth, common)
        ancestors = (*parent.ancestors, parent.id) if parent is not None else (ctx.session_id,)
        run = ForkRun(
            id=fork_id,
            depth=depth,
            task=task,
            tree=tree,
            ancestors=ancestors,
            started_at=now.isoformat(),
            granted=granted,
        )
        # The row exists before the transcript: a crash from here on is found at the next start.
        await self.lineage.start(**common)  # type: ignore[arg-type]
        # Every fork the trunk's live session has spawned (this turn's siblings, earlier trees):
        # part of the trunk's live work, so kept out of this fork's context like the trunk itself.
        others = tuple(await self.lineage.repo.in_tree(tree.root_session_id, besides=fork_id))
        self._running[fork_id] = run
        self.forks_started += 1
        prompt = brief_prompt(
            task=task,
            context=context,
            depth=depth,
            max_depth=self.cfg.max_depth,
            additions=[
                (note.source or handler, note.text.strip())
                for handler, note in gathered.of(ForkNote)
                if note.text.strip()
            ],
        )
        try:
            outcome = await self._run(run, ctx, prompt, exclude=(*ancestors, *others))
        except Exception as exc:
            # Not a model error (those end as a failed outcome): still, no row stays `running`.
            log.error("fork could not run", fork_id=fork_id, error=repr(exc), exc_info=True)
            with anyio.CancelScope(shield=True):
                await self.lineage.finish(
                    fork_id,
                    status=ForkStatus.FAILED,
                    ended_at=self.clock.now(),
                    stop_reason=repr(exc)[:500],
                    tokens=run.tokens,
                )
            raise ToolError(f"the fork {fork_id} failed to run: {exc}") from None
        finally:
            self._running.pop(fork_id, None)
        if outcome.status == ForkStatus.FAILED:
            raise ToolError(outcome.render())
        return outcome.render()

    async def _gate(
        self,
        ctx: ToolContext,
        fork_id: str,
        task: str,
        context: str,
        depth: int,
        common: dict[str, Any],
    ) -> Gathered:
        """Ask `before_fork`; a failed or vetoed gate is recorded as such and refused."""
        now = common["started_at"]
        parent_path = await self.lineage.repo.session_transcript(ctx.session_id)
        event = BeforeFork(
            parent_session_id=ctx.session_id,
            parent_transcript_path=parent_path,
            fork_session_id=fork_id,
            task=task,
            depth=depth,
            context=context,
        )
        try:
            gathered = await self.bus.gather(event)
        except HookFailed as exc:
            await self.lineage.start(**common, status=ForkStatus.FAILED)  # type: ignore[arg-type]
            await self.lineage.finish(
                fork_id, status=ForkStatus.FAILED, ended_at=now, stop_reason=str(exc)[:500]
            )
            raise ToolError(f"the fork was not started: {exc}") from None
        veto = gathered.veto
        if veto is not None:
            await self.lineage.start(**common, status=ForkStatus.VETOED)  # type: ignore[arg-type]
            await self.lineage.finish(
                fork_id,
                status=ForkStatus.VETOED,
                ended_at=now,
                stop_reason=f"{veto.by}: {veto.reason}",
            )
            raise ToolError(f"the fork was not started: vetoed by {veto.by}: {veto.reason}")
        return gathered

    async def _run(
        self, run: ForkRun, ctx: ToolContext, prompt: str, *, exclude: tuple[str, ...]
    ) -> ForkOutcome:
        relay = ForkRelay(run, ctx, self.cfg.inactivity_timeout_s)
        completion = Completion()
        loop = self._loop(run, completion, relay, exclude)
        session = await self._open_session(run, ctx)
        relay.shown("started", run.task[:200])
        log.info(
            "fork started",
            fork_id=run.id,
            depth=run.depth,
            parent=ctx.session_id,
            task=run.task[:120],
        )
        result: TurnResult | None = None
        error: str | None = None
        try:
            with relay.scope:
                result = await loop.run_turn(
                    session,
                    turn_id=f"{run.id}-t1",
                    prompt=prompt,
                    observer=relay.relay,
                    ts=self.clock.now().isoformat(),
                )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancelled(run, session, ctx)
            raise
        except (ContextFailed, ModelError) as exc:
            error = str(exc)
        relay.say(relay.spoken.flush())
        outcome = await self._outcome(run, session, relay.scope, completion, result, error)
        with anyio.CancelScope(shield=True):
            await self._finish(run, session, ctx, outcome)
        return outcome

    def _loop(
        self,
        run: ForkRun,
        completion: Completion,
        relay: ForkRelay,
        exclude: tuple[str, ...],
    ) -> AgentLoop:
        """The fork's own agent loop, one depth down, its steps charged to the tree."""
        cfg = self.cfg
        return AgentLoop(
            roles=self.roles,
            tools=self._fork_registry(run, completion),
            bus=self.bus,
            clock=self.clock,
            counter=self.counter,
            role="delegate",
            max_tool_steps=cfg.max_tool_steps,
            history_max_messages=self.settings.agent.history_max_messages,
            history_min_turns=self.settings.agent.history_min_turns,
            context_window=self.settings.models.delegate.context_window,
            session_kind="fork",
            depth=run.depth,
            exclude_sessions=exclude,
            max_parallel_tools=cfg.max_parallel,
            stop_check=relay.charge,
        )

    async def _open_session(self, run: ForkRun, ctx: ToolContext) -> Session:
        return await Session.open(
            db=self.db,
            directory=self.home.forks_dir,
            session_id=run.id,
            kind="fork",
            now=self.clock.now(),
            parent_id=ctx.session_id,
            header={
                "depth": run.depth,
                "task": run.task,
                "parent_turn": ctx.turn_id,
                "parent_call": ctx.call_id,
                "root": run.tree.root_session_id,
                "forked_at": run.started_at,
            },
        )

    async def _cancelled(self, run: ForkRun, session: Session, ctx: ToolContext) -> None:
        """The parent's turn was cancelled: end the fork's turn and record it cancelled."""
        if session.turn_ended(f"{run.id}-t1") is None:
            # Cancelled before the loop's own record (during context assembly).
            await session.record(
                TurnEnd(
                    turn_id=f"{run.id}-t1",
                    status=TurnStatus.CANCELLED,
                    ts=self.clock.now().isoformat(),
                )
            )
        await self._finish(
            run,
            session,
            ctx,
            ForkOutcome(
                fork_id=run.id,
                depth=run.depth,
                status=ForkStatus.CANCELLED,
                text="",
                reason="the parent's turn was cancelled",
            ),
        )

    async def _outcome(
        self,
        run: ForkRun,
        session: Session,
        scope: anyio.CancelScope,
        completion: Completion,
        result: TurnResult | None,
        error: str | None,
    ) -> ForkOutcome:
        """How the fork ended: stopped by a limit, failed, complete, or done without saying so."""
        cfg, tree = self.cfg, run.tree
        if scope.cancelled_caught:
            ceiling = anyio.current_time() >= tree.deadline
            reason = (
                f"the fork tree reached its ceiling of {cfg.tree_timeout_s:g}s"
                if ceiling
                else f"no activity for {cfg.inactivity_timeout_s:g}s"
            )
            partial = partial_output(session.transcript.read())
            return ForkOutcome(
                fork_id=run.id,
                depth=run.depth,
                status=ForkStatus.STOPPED,
                text=partial,
                reason=reason,
            )
        if error is not None:
            partial = partial_output(session.transcript.read())
            return ForkOutcome(
                fork_id=run.id,
                depth=run.depth,
                status=ForkStatus.FAILED,
                text=partial,
                reason=error,
            )
        if completion.called:
            # The result as a message of the fork's own: indexed, and what its summary narrates.
            await session.record(
                MessageRecord(
                    id=f"{run.id}-t1-result",
                    ts=self.clock.now().isoformat(),
                    role="assistant",
                    content=f"Task complete ({completion.outcome}): {completion.summary}",
                    turn_id=f"{run.id}-t1",
                )
            )
            return ForkOutcome(
                fork_id=run.id,
                depth=run.depth,
                status=ForkStatus.COMPLETE,
                text=completion.summary,
                outcome=completion.outcome,
                artifacts=tuple(completion.artifacts),
            )
        if result is not None and result.stop_reason == "stopped":
            return ForkOutcome(
                fork_id=run.id,
                depth=run.depth,
                status=ForkStatus.STOPPED,
                text=partial_output(session.transcript.read()),
                reason=str(result.report.get("stopped", "a limit was reached")),
            )
        return ForkOutcome(
            fork_id=run.id,
            depth=run.depth,
            status=ForkStatus.INCOMPLETE,
            text=result.text.strip() if result else "",
        )

    async def _finish(
        self, run: ForkRun, session: Session, ctx: ToolContext, outcome: ForkOutcome
    ) -> None:
        """Record how the fork ended, end its session (its own summary), tell the parent. Shielded by callers."""
        now = self.clock.now()
        summary = (
            outcome.text[:4000]
            if outcome.status in (ForkStatus.COMPLETE, ForkStatus.INCOMPLETE)
            else None
        )
        # The transcript says how it ended too, so `memory reindex` can rebuild the lineage row.
        await session.record(
            ForkEnd(
                status=outcome.status,
                outcome=outcome.outcome,
                summary=summary,
                reason=outcome.reason,
                tokens=run.tokens,
                ts=now.isoformat(),
            )
        )
        await self.lineage.finish(
            run.id,
            status=outcome.status,
            ended_at=now,
            outcome=outcome.outcome,
            summary=summary,
            stop_reason=outcome.reason,
            tokens=run.tokens,
        )
        await self.lineage.repo.end_session(run.id, now.isoformat())
        await self.bus.publish(
            ForkFinished(
                fork_session_id=run.id,
                parent_session_id=ctx.session_id,
                status=outcome.status,
                depth=run.depth,
            )
        )
        # The fork's own summary (tagged as a fork by its session kind) is written from here.
        await self.bus.publish(
            SessionShutdown(
                session_id=run.id,
                transcript_path=str(session.path),
                reason=f"fork {outcome.status}",
            )
        )
        ctx.observer(
            ToolPhase(
                turn_id=ctx.turn_id,
                name="fork",
                phase="finished",
                depth=run.depth,
                fork_id=run.id,
                is_error=outcome.status != ForkStatus.COMPLETE,
                detail=f"{outcome.status}: {' '.join(outcome.text.split())[:200]}"
                if outcome.text
                else outcome.status,
            )
        )
        if run.depth == 1:
            await self.bus.publish(
                JournalNote(
                    summary=f"fork tree for “{run.task[:120]}” {outcome.status} ({run.tree.tokens:,} tokens)",
                    tags=("delegate", outcome.status),
                    session_id=ctx.session_id,
                    progress=(f"{run.id}: {outcome.status}",),
                )
            )
        log.info(
            "fork finished",
            fork_id=run.id,
            depth=run.depth,
            status=outcome.status,
            reason=outcome.reason,
            tokens=run.tokens,
        )

    def _interrupted_report(self, rows: list[ForkRow]) -> str:
        lines = []
        for row in rows:
            partial = (
                partial_output(Transcript(path=Path(row.transcript_path), session_id=row.id).read())
                if Path(row.transcript_path).exists()
                else ""
            )
            outcome = ForkOutcome(
                fork_id=row.id,
                depth=row.depth,
                status=ForkStatus.FAILED,
                text=partial,
                reason=f"{INTERRUPTED} (task: {row.task[:200]})",
            )
            lines.append(outcome.render())
        return (
            "\n\n".join(lines)
            + "\n\nNothing was retried; call delegate again to run the task anew."
        )

    async def status(self) -> dict[str, Any]:
        """Running forks (this process) and the lineage's counts by status."""
        return {
            "running": self.running,
            "started": self.forks_started,
            "by_status": await self.lineage.repo.counts_by_status(),
        }
