"""Approvals: the permission policy applied to every call, and the person asked when it says so.

`PermissionGuard` is the registry's `ToolGuard`. For each call the policy decides (see
`policy.py`): allow runs it; deny refuses it, naming the rule; ask computes what the call
would do (`Tool.preview` — an edit's diff; a preview that fails refuses the call without
asking) and puts the question to the person through `Approvals`.

`Approvals` holds the questions in flight and the person's connected clients: the chat
gateway attaches every client of the daemon's own uid (`os.geteuid()`, the person whose
daemon this is) and nobody else's — a client admitted through `[chat] allow_uids` may talk
to the agent, never approve what it does. A question goes out as an `approval` frame to
those clients; the first `approve` answer settles it. Nobody connected is a no at once, and
no answer within `[permissions] approval_timeout_s` is a no: an unattended daemon never runs
an `ask` tool. "always" saves an allow for the frame's pattern (`SavedApprovals`).

Every decision that is not a tool's plain default allow is written to the session's
transcript (an `approval` record, through `ctx.extras["record"]`) and logged (`tool
approval`); the model reads the reason of every refusal. A text a tool brought in (a page
that says "run rm -rf ~") can make the model ask, never make the call run: only the
person's answer, a configured rule or a saved answer does.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from daemon.chat import protocol
from daemon.chat.protocol import ApprovalAnswer, ErrorCode
from daemon.clock import Clock, SystemClock
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.records import ApprovalRecord
from daemon.tools.policy import PermissionPolicy, proposed_pattern, subject_of
from daemon.tools.registry import Tool, ToolContext, ToolError
from daemon.tools.summary import bounded, masked_line, summarise_call
from daemon.tools.workspace import Workspace

log = get_logger("tools.approvals")

# Who settled a question: the person, or the reason nobody did.
Settler = Literal["person", "timeout", "nobody", "cancelled"]
Recorder = Callable[[ApprovalRecord], Awaitable[None]]
# An approval frame's subject (a command, a path, a URL) is sent whole up to this size.
MAX_SUBJECT_CHARS = 20_000


class ApprovalRefused(ReverieError):
    """An `approve` frame that changes nothing; `code` and the message go into its error frame."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, kw_only=True)
class ApprovalRequest:
    """One question to the person: may this call run?"""

    id: str
    turn_id: str
    session_id: str
    tool: str
    subject: str | None
    summary: str
    preview: str
    pattern: str
    timeout_s: float

    def frame(self) -> dict[str, Any]:
        return protocol.approval(
            id=self.id,
            turn_id=self.turn_id,
            session_id=self.session_id,
            tool=self.tool,
            subject=self.subject,
            summary=self.summary,
            preview=self.preview,
            pattern=self.pattern,
            timeout_s=self.timeout_s,
        )


@dataclass(frozen=True, kw_only=True)
class Settled:
    """How a question ended: the answer (None when nobody gave one) and who settled it."""

    answer: ApprovalAnswer | None
    by: Settler
    client: str | None = None


@dataclass(eq=False)
class _Pending:
    request: ApprovalRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    settled: Settled | None = None


class Approvals:
    """The questions in flight and the person's clients they go to."""

    def __init__(self, *, person_uid: int | None = None) -> None:
        self.person_uid = os.geteuid() if person_uid is None else person_uid
        self._clients: dict[str, Any] = {}
        self._pending: dict[str, _Pending] = {}

    def attach(self, client: Any) -> bool:
        """Let `client` receive questions, if it is the person's; return whether it is."""
        if client.uid != self.person_uid:
            return False
        self._clients[client.id] = client
        return True

    def detach(self, client: Any) -> None:
        """Stop asking `client` (it left, or shut its sending side and can never answer).

        When the person's last client goes, the questions waiting are settled as no at once:
        nobody is left to answer them.
        """
        self._clients.pop(client.id, None)
        if self._clients:
            return
        for pending in self._pending.values():
            if pending.settled is None:
                pending.settled = Settled(answer=None, by="nobody")
                pending.done.set()

    async def ask(self, request: ApprovalRequest) -> Settled:
        """Send `request` to the person's clients; wait for the first answer, or the timeout.

        Nobody to ask → settled at once with no answer. Cancellation (the turn was cancelled)
        withdraws the question and propagates.
        """
        frame = request.frame()
        reached = sum(1 for c in list(self._clients.values()) if not c.closed and c.send(frame))
        if not reached:
            return Settled(answer=None, by="nobody")
        pending = _Pending(request)
        self._pending[request.id] = pending
        settled = Settled(answer=None, by="cancelled")
        try:
            with anyio.move_on_after(request.timeout_s):
                await pending.done.wait()
            settled = pending.settled or Settled(answer=None, by="timeout")
        finally:
            self._pending.pop(request.id, None)
            # Every client that showed the question can put it away (one answered, or none).
            done = protocol.approval_settled(id=request.id, answer=settled.answer, by=settled.by)
            for client in list(self._clients.values()):
                if not client.closed:
                    client.send(done)
        return settled

    def answer(self, client: Any, approval_id: str, decision: ApprovalAnswer) -> ApprovalRequest:
        """Settle question `approval_id` with `client`'s answer; return the question.

        Raises `ApprovalRefused`: `forbidden` for a client not of the person's uid (nothing
        changes), `unknown_approval` for an id that is not waiting (answered, timed out, or
        never asked).
        """
        if client.uid != self.person_uid:
            raise ApprovalRefused(
                ErrorCode.FORBIDDEN,
                f"uid {client.uid} may not answer approvals: only the daemon's own uid "
                f"({self.person_uid}) may",
            )
        pending = self._pending.get(approval_id)
        if pending is None or pending.settled is not None:
            raise ApprovalRefused(
                ErrorCode.UNKNOWN_APPROVAL,
                f"no approval {approval_id!r} is waiting (already answered, timed out, or never asked)",
            )
        pending.settled = Settled(answer=decision, by="person", client=client.id)
        pending.done.set()
        return pending.request


class PermissionGuard:
    """The `ToolGuard` every registry of the daemon shares: policy first, then the person."""

    def __init__(
        self,
        *,
        policy: PermissionPolicy,
        approvals: Approvals,
        timeout_s: float,
        workspace: Workspace | None = None,
        clock: Clock | None = None,
        keepalive_s: float = 30.0,
    ) -> None:
        self.policy = policy
        self.approvals = approvals
        self.timeout_s = timeout_s
        # While a question waits, the call reports progress this often: the person sees it
        # waits, and a fork (stopped after a silence) knows it is not idle.
        self.keepalive_s = keepalive_s
        self.workspace = workspace
        self.clock = clock or SystemClock()

    async def authorize(
        self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext
    ) -> str | None:
        """None when the call may run; otherwise why not, for the model to read.

        Waits for the person at most `timeout_s`; cancellation withdraws the question.
        """
        verdict = self.policy.decide(tool, arguments)
        subject = subject_of(tool, arguments)
        if verdict.decision == "allow":
            if verdict.source != "default":
                await self._decided(ctx, tool, subject, "allow", verdict.source, verdict.why)
            return None
        if verdict.decision == "deny":
            reason = f"{tool.name} was denied by {verdict.why}; it did not run"
            await self._decided(ctx, tool, subject, "deny", verdict.source, reason)
            return reason
        return await self._ask(tool, arguments, ctx, subject, verdict.why)

    async def confirm(
        self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext, why: str
    ) -> str | None:
        """Ask the person about a call their policy would let through on its tool's default.

        For a call made on the strength of untrusted text (a schedule proposed after reading a
        tool's output): a configured rule or a saved "always" that allows it still stands;
        otherwise the person is asked — the same frame, timeout, record and log as any `ask`.
        None when it may go ahead, else why not.
        """
        verdict = self.policy.decide(tool, arguments)
        if verdict.decision == "allow" and verdict.source != "default":
            return None
        return await self._ask(tool, arguments, ctx, subject_of(tool, arguments), why)

    async def _ask(
        self,
        tool: Tool,
        arguments: dict[str, Any],
        ctx: ToolContext,
        subject: str | None,
        why: str,
    ) -> str | None:
        preview = ""
        if tool.preview is not None:
            try:
                preview = await tool.preview(ctx, arguments)
            except ToolError as exc:
                # The call would fail anyway: nothing to ask the person about.
                reason = f"{tool.name} could not be done: {exc}"
                await self._decided(ctx, tool, subject, "no", "preview", reason)
                return reason
        pattern = proposed_pattern(tool, arguments, self.workspace)
        request = ApprovalRequest(
            id="ap-" + uuid.uuid4().hex[:12],
            turn_id=ctx.turn_id,
            session_id=ctx.session_id,
            tool=tool.name,
            # Whole: the person approves exactly what runs (a cut is marked, never silent).
            subject=None if subject is None else bounded(subject, MAX_SUBJECT_CHARS),
            summary=summarise_call(tool.name, arguments, subject=tool.subject),
            preview=preview,
            pattern=pattern,
            timeout_s=self.timeout_s,
        )
        log.info("tool approval asked", tool=tool.name, approval=request.id, why=why)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._keep_alive, ctx, request)
            settled = await self.approvals.ask(request)
            tg.cancel_scope.cancel()
        if settled.answer in ("yes", "always"):
            saved = None
            if settled.answer == "always" and self.policy.saved is not None:
                # An fsynced file write: off the event loop.
                await anyio.to_thread.run_sync(
                    functools.partial(
                        self.policy.saved.save, tool.name, pattern, now=self.clock.now()
                    )
                )
                saved = pattern
            reason = (
                f"the person approved this {tool.name} call"
                if saved is None
                else f'the person approved {tool.name} calls matching "{saved}" from now on'
            )
            await self._decided(ctx, tool, subject, settled.answer, "person", reason, pattern=saved)
            return None
        if settled.by == "nobody":
            reason = (
                f"{tool.name} needs the person's approval and no client of theirs is connected "
                "to give it — treated as no; it did not run"
            )
        elif settled.by == "timeout":
            reason = (
                f"no answer within {self.timeout_s:g} s to the approval of this {tool.name} "
                "call — treated as no; it did not run"
            )
        else:
            reason = f"the person declined this {tool.name} call; it did not run"
        await self._decided(ctx, tool, subject, "no", settled.by, reason)
        return reason

    async def _keep_alive(self, ctx: ToolContext, request: ApprovalRequest) -> None:
        waited = 0.0
        while True:
            left = request.timeout_s - waited
            ctx.progress(f"waiting for the person's approval ({left:.0f} s left)")
            await anyio.sleep(self.keepalive_s)
            waited += self.keepalive_s

    async def _decided(
        self,
        ctx: ToolContext,
        tool: Tool,
        subject: str | None,
        decision: str,
        by: str,
        reason: str,
        *,
        pattern: str | None = None,
    ) -> None:
        log.info(
            "tool approval",
            tool=tool.name,
            decision=decision,
            by=by,
            reason=reason,
            subject=None if subject is None else masked_line(subject),
        )
        record: Recorder | None = ctx.extras.get("record")
        if record is None:
            return
        await record(
            ApprovalRecord(
                turn_id=ctx.turn_id,
                call_id=ctx.call_id,
                tool=tool.name,
                subject=subject,
                decision=decision,
                by=by,
                reason=reason,
                pattern=pattern,
                ts=self.clock.now().isoformat(),
            )
        )
