"""How one trunk turn is tried, and how it ends: the inbox told first, then the person, then
the turn's report and the bus.

`attempt` runs the turn once and sorts what stopped it: a result, an error that fails the
turn (the request rejected, the spend cap, the context, a turn timeout outside a model call,
a bug), or a passing reason that keeps its message queued for a retry (`Kept`: the model
unreachable, a reply that broke off or stalled past the turn timeout, storage refusing a
write). `TurnEnds` records the end of a turn that is not kept.
"""

from __future__ import annotations

import anyio

from daemon.agent.inbox import Inbox, InboxEntry
from daemon.agent.listeners import Listeners
from daemon.agent.loop import AgentLoop, ContextFailed, TurnResult
from daemon.agent.retry import Kept, TurnRetry
from daemon.agent.session import Session
from daemon.agent.turns import TurnDone, TurnFailed, TurnObserver
from daemon.chat.protocol import ErrorCode
from daemon.clock import Clock
from daemon.events import TurnFinished
from daemon.log import get_logger
from daemon.models.base import ModelError, ModelUnavailable, SpendCapReached
from daemon.records import TurnEnd, TurnStatus
from daemon.store.db import Database
from daemon.store.errors import storage_failure, unless_storage_refuses
from daemon.store.turn_reports import TurnReport, TurnReportsRepo

log = get_logger("trunk")

Attempt = tuple[TurnResult | None, tuple[ErrorCode, str] | None, Kept | None]


async def attempt(
    loop: AgentLoop,
    entry: InboxEntry,
    session: Session,
    scope: anyio.CancelScope,
    *,
    timeout_s: float,
    observer: TurnObserver,
) -> Attempt:
    """Run the turn once: its result, or the error that failed it, or why it is kept (all
    None: the scope was cancelled, the person's cancel)."""
    try:
        with scope:
            with anyio.fail_after(timeout_s):
                result = await loop.run_turn(
                    session,
                    turn_id=entry.id,
                    prompt=entry.text,
                    observer=observer,
                    ts=entry.ts.isoformat(),
                )
                return result, None, None
    except TimeoutError:
        if loop.cut_in_model_call:
            limit = f"no whole reply within the {timeout_s:.0f}s turn limit"
            return None, None, Kept(reason=limit)
        stopped = f"the turn took longer than {timeout_s:.0f}s and was stopped"
        return None, (ErrorCode.TIMEOUT, stopped), None
    except ContextFailed as exc:
        return None, (ErrorCode.CONTEXT_FAILED, str(exc)), None
    except SpendCapReached as exc:
        return None, (ErrorCode.SPEND_CAP, str(exc)), None
    except ModelUnavailable as exc:
        return None, None, Kept(reason=str(exc) or type(exc).__name__)
    except ModelError as exc:
        if exc.retryable:
            return None, None, Kept(reason=str(exc))
        return None, (ErrorCode.MODEL_ERROR, str(exc)), None
    except Exception as exc:
        storage = storage_failure(exc)
        if storage is not None:
            return None, None, Kept(reason=storage, storage=True)
        log.exception("turn stopped by an internal error", turn_id=entry.id)
        return (
            None,
            (ErrorCode.INTERNAL, f"an internal error stopped this turn ({exc!r})"),
            None,
        )
    # The scope was cancelled (the person's cancel): nothing ran to an end.
    return None, None, None


class TurnEnds:
    """Records the end of a trunk turn that is not kept, and tells its listener."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        listeners: Listeners,
        retry: TurnRetry,
        loop: AgentLoop,
        clock: Clock,
        db: Database,
    ) -> None:
        self.inbox = inbox
        self.listeners = listeners
        self.retry = retry
        self.loop = loop
        self.clock = clock
        self.reports = TurnReportsRepo(db)

    async def finish(self, entry: InboxEntry, status: TurnStatus) -> None:
        """Mark the entry handled in the inbox (shielded: it is on disk before anyone is told).

        When storage refuses the `done` record the turn's own end in the transcript still
        stands, and a restart reads it there rather than answering the message twice.
        """
        with unless_storage_refuses(
            log, "inbox could not record a finished turn", turn_id=entry.id
        ):
            await self.inbox.done(entry.id, status)
        self.inbox.pop(entry.id)
        self.listeners.forget(entry.id)
        self.retry.forget(entry.id)

    async def cancelled(self, entry: InboxEntry) -> None:
        """The person cancelled the running turn."""
        observer = self.listeners.of(entry.id)
        await self.finish(entry, TurnStatus.CANCELLED)
        observer(TurnFailed(turn_id=entry.id, code=ErrorCode.CANCELLED, message="turn cancelled"))

    async def failed(
        self, entry: InboxEntry, session: Session, error: tuple[ErrorCode, str]
    ) -> None:
        """Record a failed turn (the loop recorded a context failure itself) and tell the person."""
        log.warning("turn failed", turn_id=entry.id, code=str(error[0]), error=error[1])
        failed = TurnFailed(turn_id=entry.id, code=error[0], message=error[1])
        observer = self.listeners.of(entry.id)
        if error[0] is not ErrorCode.CONTEXT_FAILED:
            with unless_storage_refuses(log, "turn end not recorded", turn_id=entry.id):
                await session.record(
                    TurnEnd(
                        turn_id=entry.id,
                        status=TurnStatus.FAILED,
                        error=error[1],
                        ts=self.clock.now().isoformat(),
                    )
                )
        await self.finish(entry, TurnStatus.FAILED)
        observer(failed)

    async def answered(self, entry: InboxEntry, result: TurnResult) -> None:
        """An answered turn: the inbox hears first, then the person (the report and the bus
        follow, `published`)."""
        # The inbox hears first, so a listener told "done" never sees the message answered again.
        observer = self.listeners.of(entry.id)
        await self.finish(entry, TurnStatus.ANSWERED)
        if result.vetoed:
            observer(TurnFailed(turn_id=entry.id, code=ErrorCode.VETOED, message=result.vetoed))
        else:
            observer(
                TurnDone(
                    turn_id=entry.id,
                    text=result.text,
                    stop_reason=result.stop_reason,
                    usage=result.usage.__dict__,
                )
            )

    async def published(self, entry: InboxEntry, session: Session, result: TurnResult) -> None:
        """An answered turn's report stored, and the turn published as `TurnFinished`."""
        if result.report:
            # An explanation of the turn, not the turn: the reply stands without it.
            with unless_storage_refuses(log, "turn report not stored", turn_id=entry.id):
                await self.reports.add(
                    TurnReport(
                        turn_id=entry.id,
                        session_id=session.id,
                        ts=self.clock.now().isoformat(),
                        context_tokens=int(result.report.get("total_tokens", 0)),
                        report=result.report,
                    )
                )
        # Delivered beside the next turn, so a message sent right after a reply does not wait.
        await self.loop.bus.publish(
            TurnFinished(
                session_id=session.id,
                turn_id=entry.id,
                stop_reason=result.stop_reason,
                context_tokens=result.context_tokens,
                vetoed=bool(result.vetoed),
            )
        )
