"""`reverie chat -m`: send one message, stream the reply, answer its approvals, exit.

The first Ctrl-C sends `cancel` and waits for the turn to end; a second one leaves.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from daemon.chat import wire
from daemon.chat.client import ChatClient, ChatError, MessageSaved
from daemon.cli.approvals import PreApproval, pre_approved
from daemon.cli.chat_notes import EXIT_SAVED, Notes
from daemon.cli.support import CommandError

# How long `chat -m` waits, once its turn ended, for the `seen` of the notices it showed to go out.
SEEN_FLUSH_S = 2.0


async def send_one(
    path: Path,
    text: str,
    *,
    timeout: float,  # noqa: ASYNC109
    approvals: list[PreApproval] | None = None,
) -> int:
    """Send `text`, stream the reply to stdout, end with a newline; return the exit code.

    The first Ctrl-C sends `cancel` and waits for the turn to end; a second one leaves. An
    approval this turn (or a fork under it) asks for is answered at once: yes when one of
    `approvals` covers the call, otherwise no; approvals of other turns are left to others.
    """
    out = sys.stdout
    notes = Notes(sys.stderr)
    streamed = False
    turn: dict[str, str] = {}
    forks: set[str] = set()
    # Answers and `seen`s decided in `on_frame` (which cannot await), sent in order by a task;
    # unbounded because a chat may open with any number of notices.
    send_answer, answers = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
    answers_sent = anyio.Event()

    def answer(frame: dict[str, Any]) -> None:
        if frame.get("turn_id") != turn.get("id") and frame.get("session_id") not in forks:
            return
        covering = pre_approved(frame, approvals or [])
        summary = frame.get("summary") or frame.get("tool")
        if covering is not None:
            line = f"approved {summary} (--approve {covering})"
        else:
            line = f"declined {summary}: not covered by --approve"
        print(notes.line(line), file=sys.stderr, flush=True)
        decision = "yes" if covering is not None else "no"
        send_answer.send_nowait(wire.approve(id=str(frame.get("id")), decision=decision))

    def on_frame(frame: dict[str, Any]) -> None:
        nonlocal streamed
        if frame.get("turn_id") == turn.get("id") and frame.get("fork_id"):
            forks.add(str(frame["fork_id"]))
        if frame.get("type") == "approval":
            answer(frame)
        elif frame.get("type") == "notice" and frame.get("quiet"):
            if notes.tty:  # a passing line, like the other side notes; nothing to answer
                print(notes.describe(frame), file=sys.stderr, flush=True)
        elif frame.get("type") == "notice":
            # What came while the person was away: on stderr, so stdout stays the reply.
            print(notes.describe(frame), file=sys.stderr, flush=True)
            send_answer.send_nowait(wire.seen(ids=[str(frame.get("id"))]))
        elif frame.get("type") == "delta":
            out.write(str(frame.get("text", "")))
            out.flush()
            streamed = True
        elif frame.get("type") == "done" and not streamed:
            # A provider that does not stream sends the whole reply at the end.
            out.write(str(frame.get("text", "")))
        elif notes.tty and (note := notes.describe(frame)):
            print(note, file=sys.stderr, flush=True)

    done: dict[str, Any] = {}
    failure: ChatError | None = None
    interrupted = anyio.Event()
    try:
        async with ChatClient.connect(path, timeout=min(timeout, 10.0)) as client:
            async with anyio.create_task_group() as tg:
                if threading.current_thread() is threading.main_thread():
                    tg.start_soon(
                        _cancel_on_interrupt, client, turn, notes, interrupted, tg.cancel_scope
                    )
                tg.start_soon(_send_answers, client, answers, answers_sent)
                try:
                    done = await client.run_turn(
                        text, on_frame, timeout=timeout, on_accepted=lambda tid: turn.update(id=tid)
                    )
                except ChatError as exc:
                    failure = exc
                # The notices shown are told before leaving, or the next chat shows them again.
                send_answer.close()
                with anyio.move_on_after(SEEN_FLUSH_S):
                    await answers_sent.wait()
                tg.cancel_scope.cancel()
    except ChatError as exc:
        failure = exc
    if streamed or (done and done.get("text")):
        out.write("\n")
        out.flush()
    if interrupted.is_set() and not done and failure is None:
        raise CommandError("interrupted", code=130)
    if isinstance(failure, MessageSaved):
        raise CommandError(failure.message, code=EXIT_SAVED)
    if failure is not None:
        raise CommandError(failure.message, code=130 if failure.code == "cancelled" else 1)
    return 130 if done.get("stop_reason") == "cancelled" else 0


async def _send_answers(
    client: ChatClient, answers: MemoryObjectReceiveStream[Any], sent: anyio.Event
) -> None:
    """Send each approval answer and `seen` as it is decided (`on_frame` cannot await a send).

    `sent` is set once the queue is closed and emptied, or the daemon went away (nothing more
    can be told; the turn's own reading reports it).
    """
    try:
        async for frame in answers:
            await client.send(frame)
    except ChatError:
        pass
    finally:
        sent.set()


async def _cancel_on_interrupt(
    client: ChatClient,
    turn: dict[str, str],
    notes: Notes,
    interrupted: anyio.Event,
    scope: anyio.CancelScope,
) -> None:
    """First Ctrl-C: ask the daemon to cancel the turn. Second: stop waiting."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            if interrupted.is_set():
                scope.cancel()
                return
            interrupted.set()
            print(notes.line("cancelling… (Ctrl-C again to leave)"), file=sys.stderr, flush=True)
            try:
                await client.send(wire.cancel(turn_id=turn.get("id")))
            except ChatError:
                scope.cancel()
                return
