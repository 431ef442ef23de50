"""`reverie chat`: talk to the running daemon, one message (`-m`) or interactively.

A tool call that needs the person's approval shows up as an `approval` frame: the
interactive client shows it inline (the tool, what it acts on, its diff) and reads y / n / a;
`chat -m` answers at once — yes when an `--approve` pattern covers the call, else no.

A `notice` (a reminder, a task's result, the morning greeting) is shown as it comes; what
came while nobody was connected arrives right after `hello`, so a chat opens with it
(`chat -m` writes notices to stderr, keeping stdout the reply). Once a notice is printed the
client answers `seen` with its id: only then does the daemon count it delivered.

The interactive client reads the keyboard with `input()` on the main thread — the only
thread where Ctrl-C interrupts readline cleanly and the terminal is restored — while the
connection lives on an event loop in a blocking portal's thread. So reading stdin never
blocks the loop: `state` frames arrive and are shown while the prompt waits. The connection
outlives the daemon: when it stops, the chat says so in one line and connects again once a
daemon answers on the same socket, saying so (`ChatSession`).

Size: the one-message and the interactive client, their notes and the approval prompts,
share the frame handling and are read in one place.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import anyio
from anyio.from_thread import start_blocking_portal
from anyio.streams.memory import MemoryObjectReceiveStream

from daemon.chat import wire
from daemon.chat.client import ChatClient, ChatError, MessageSaved, new_id
from daemon.cli.approvals import (
    PROMPT,
    PreApproval,
    parse_answer,
    parse_pre_approvals,
    pre_approved,
    question,
)
from daemon.cli.locate import socket_for
from daemon.cli.support import CommandError, print_err, resolve_env

HELP = """commands:
  /status         the daemon's state, session, context use, spend
  /sleep          start a sleep cycle now
  /journal [N]    the last N journal entries (default 10)
  /help           this help
  /quit           leave (Ctrl-D works too)
  //text          send a message that starts with '/'
Ctrl-C during a reply cancels the turn; at an empty prompt it leaves."""


# `chat -m` exit status when the daemon went away after saving the message (EX_TEMPFAIL): the
# reply is owed, not lost, so a script should not send the message again.
EXIT_SAVED = 75
# How long `chat -m` waits, once its turn ended, for the `seen` of the notices it showed to go out.
SEEN_FLUSH_S = 2.0
# The interactive chat, once the daemon is gone: how often it tries to connect again, how long
# each try may take, and how long a message typed meanwhile waits for the daemon to be back.
RECONNECT_EVERY_S = 0.5
CONNECT_TIMEOUT_S = 5.0
BACK_WAIT_S = 3.0


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "chat",
        parents=[common],
        help="talk to the running daemon",
        description="Talk to the running daemon. Without -m: an interactive client.",
    )
    p.add_argument(
        "-m",
        "--message",
        metavar="TEXT",
        help="send one message, stream the reply, exit ('-' reads stdin)",
    )
    p.add_argument(
        "--approve",
        action="append",
        metavar="PATTERN",
        help="with -m: let calls that need approval run when PATTERN covers them — TOOL, or "
        "TOOL:GLOB on the call's command, path or URL (e.g. 'run:pytest*', read_file); "
        "repeatable; any other approval is answered no",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up waiting for a reply after this long (default: agent.turn_timeout_s + 30)",
    )
    p.set_defaults(func=run_chat)


def run_chat(args: argparse.Namespace) -> Any:
    env = resolve_env(args, create=False)
    path = socket_for(env.home, env.settings.chat.socket)
    timeout = args.timeout if args.timeout is not None else env.settings.agent.turn_timeout_s + 30
    if timeout <= 0:
        raise CommandError("--timeout must be positive", code=2)
    try:
        approvals = parse_pre_approvals(args.approve)
    except ValueError as exc:
        raise CommandError(str(exc), code=2) from None
    if args.message is not None:
        text = sys.stdin.read() if args.message == "-" else args.message
        if not text.strip():
            raise CommandError("the message is empty", code=2)
        return send_one(path, text, timeout=timeout, approvals=approvals)
    if approvals:
        raise CommandError("--approve goes with -m (an interactive chat asks you)", code=2)
    history = env.home.root / ".chat_history" if env.home.root.is_dir() else None
    return InteractiveChat(path, history=history, turn_timeout=timeout).run()


# --- one message -----------------------------------------------------------------------


class Notes:
    """Show side information (tools, state) as dim one-liners, plain when not a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def line(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.tty else f"[{text}]"

    def describe(self, frame: dict[str, Any]) -> str | None:
        kind = frame.get("type")
        if kind == "tool":
            phase = frame.get("phase", "")
            depth = int(frame.get("depth") or 0)
            if frame.get("name") == "fork":
                text = (
                    f"{'  ' * (depth - 1)}fork {frame.get('fork_id', '?')} (depth {depth}) {phase}"
                )
            elif frame.get("summary") and phase == "started":
                # One line per call, saying what it does; only a failure adds a second.
                text = f"{'  ' * depth}▸ {frame['summary']}" + (
                    f" in {frame['fork_id']}" if frame.get("fork_id") else ""
                )
            elif phase == "finished" and not frame.get("is_error"):
                return None
            else:
                text = f"{'  ' * depth}tool {frame.get('name', '?')} {phase}" + (
                    f" in {frame['fork_id']}" if frame.get("fork_id") else ""
                )
            if frame.get("is_error"):
                text += " (error)"
            if frame.get("detail"):
                text += f": {frame['detail']}"
            return self.line(text)
        if kind == "notice" and frame.get("quiet"):
            # A passing line (the heartbeat's): one dim line, its time and its text.
            text = " ".join(str(frame.get("text", "")).split())
            return self.line(f"{notice_heading(frame)} · {text}")
        if kind == "notice":
            return self.line(notice_heading(frame)) + "\n" + str(frame.get("text", ""))
        if kind == "state":
            text = f"state: {frame.get('state', '?')}"
            if frame.get("detail"):
                text += f" ({frame['detail']})"
            return self.line(text)
        return None


def notice_heading(frame: dict[str, Any]) -> str:
    """`reminder · 09:00 · 12 min late`: what a notice is and when, in this machine's time."""
    parts = [str(frame.get("kind") or "notice")]
    try:
        when = datetime.fromisoformat(str(frame.get("due_at") or frame.get("ts")))
        parts.append(when.astimezone().strftime("%a %H:%M"))
    except ValueError:
        pass
    late = float(frame.get("late_s") or 0)
    if late >= 60:
        parts.append(f"{round(late / 60)} min late" if late < 5400 else f"{late / 3600:.1f} h late")
    return " · ".join(parts)


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


# --- interactive -----------------------------------------------------------------------


class ChatSession:
    """The event-loop side of the interactive client: the connection, frames dispatched.

    Runs inside a blocking portal; the main thread calls its coroutines through it. When the
    daemon goes away (stopped, restarted, killed) the session says so in one line and, with
    `reconnect`, connects again as soon as a daemon answers on the same socket, saying so; the
    prompt stays. A message or a command typed meanwhile waits `BACK_WAIT_S` for the daemon,
    then is refused with one line (nothing is sent: the person sends it again once it is back).
    """

    def __init__(self, client: ChatClient, screen: Screen, *, reconnect: bool = True) -> None:
        self.client = client
        self.screen = screen
        self.reconnect = reconnect
        # Why the connection is down (None while connected); `_up` is set while connected.
        self.lost: str | None = None
        self._up = anyio.Event()
        self._up.set()
        self._stopping = False
        self._message_id: str | None = None
        self._turn_id: str | None = None
        self._turn_end: anyio.Event | None = None
        self._turn_outcome: dict[str, Any] | None = None
        self._commands: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        # Turns the daemon kept while the model was down: their replies come later, unasked.
        self._kept: set[str] = set()
        # Approvals waiting for the person's answer, oldest first; the ids already answered.
        self.questions: list[dict[str, Any]] = []
        self._answered: set[str] = set()
        # Questions settled in the daemon (answered here or elsewhere, or timed out).
        self._settled: dict[str, dict[str, Any]] = {}
        # Set when the main thread has something to do: the turn ended, or a question came.
        self._attention = anyio.Event()

    @classmethod
    @asynccontextmanager
    async def open(
        cls, path: Path, screen: Screen, *, reconnect: bool = True
    ) -> AsyncIterator[ChatSession]:
        """Connect (a `ChatError` when no daemon answers now), then keep the connection."""
        async with ChatClient.connect(path) as first, anyio.create_task_group() as tg:
            session = cls(first, screen, reconnect=reconnect)
            tg.start_soon(session._keep, path)
            yield session
            tg.cancel_scope.cancel()

    async def _keep(self, path: Path) -> None:
        """Dispatch the connection's frames; when it is lost, connect again while `reconnect`."""
        await self._dispatch()
        while self.reconnect:
            try:
                async with ChatClient.connect(path, timeout=CONNECT_TIMEOUT_S) as client:
                    self.client = client
                    self.lost = None
                    self._stopping = False
                    self._up.set()
                    hello = client.hello
                    self.screen.note(
                        f"reconnected: the daemon is back ({hello.get('state', '?')}, "
                        f"session {hello.get('session_id', '?')})"
                    )
                    await self._dispatch()
            except ChatError:
                await anyio.sleep(RECONNECT_EVERY_S)

    async def _dispatch(self) -> None:
        try:
            async for frame in self.client.frames():
                if frame.get("type") == "state" and frame.get("state") == "stopping":
                    self._stopping = True  # said in the one line that follows
                    continue
                self._route(frame)
                if frame.get("type") == "notice" and not frame.get("quiet"):
                    # Printed by `_route`: now the daemon may count it delivered.
                    await self.client.seen([str(frame.get("id"))])
            why = "the daemon closed the connection"
        except ChatError as exc:
            why = exc.message
        self._up = anyio.Event()
        self.lost = "the daemon stopped" if self._stopping else f"lost the daemon ({why})"
        if self.reconnect:
            self.screen.note(f"{self.lost}; reconnecting when it is back (Ctrl-D leaves)")
        else:
            self.screen.note(self.lost)
        if self._turn_end is not None:
            # An accepted message is on disk: the person hears it is owed a reply, not lost.
            if self._turn_id:
                lost = MessageSaved(self._turn_id).message
                self._kept.add(self._turn_id)  # its reply may come once the daemon is back
            else:
                lost = self.lost
            self._turn_outcome = {"type": "error", "code": "lost", "message": lost}
            self._turn_end.set()
            self._attention.set()
        for event, box in self._commands.values():
            box.append({"type": "error", "code": "lost", "message": self.lost})
            event.set()

    def _route(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "approval":
            self.questions.append(frame)
            self._attention.set()
            if self._turn_end is None:
                summary = frame.get("summary") or frame.get("tool")
                self.screen.note(f"an approval is waiting ({summary}): press Enter to answer")
            return
        if kind == "approval_settled":
            aid = str(frame.get("id"))
            self._settled[aid] = frame
            waiting = [q for q in self.questions if q.get("id") == aid]
            if waiting and aid not in self._answered:
                self.questions.remove(waiting[0])
                self.screen.note(f"{_summary(waiting[0])}: {_settled_text(frame)}")
            return
        if kind == "error" and frame.get("id") in self._answered:
            self.screen.note(f"that answer came too late: {frame.get('message', '')}")
            return
        if kind == "result" or (kind == "error" and frame.get("id") in self._commands):
            waiter = self._commands.get(str(frame.get("id")))
            if waiter is not None:
                waiter[1].append(frame)
                waiter[0].set()
            return
        if kind == "accepted" and frame.get("id") == self._message_id:
            self._turn_id = str(frame.get("turn_id"))
            return
        mine = self._turn_end is not None and (
            (self._turn_id is not None and frame.get("turn_id") == self._turn_id)
            or (frame.get("id") is not None and frame.get("id") == self._message_id)
        )
        turn = frame.get("turn_id")
        if kind == "error" and mine and frame.get("code") == "model_unavailable" and turn:
            self._kept.add(str(turn))
        elif kind in ("done", "error") and not mine and turn in self._kept:
            self._kept.discard(str(turn))
            if kind == "done":
                self.screen.late_reply(
                    "the model is back; the reply to a message it had kept:",
                    str(frame.get("text", "")),
                )
            else:
                self.screen.note(f"a kept message failed: {frame.get('message', '')}")
            return
        if kind == "delta" and mine:
            self.screen.delta(str(frame.get("text", "")))
        elif kind in ("done", "error") and (
            mine or (kind == "error" and "turn_id" not in frame and "id" not in frame)
        ):
            if self._turn_end is not None:
                self._turn_outcome = frame
                self._turn_end.set()
                self._attention.set()
            else:
                self.screen.note(f"error: {frame.get('message', '')}")
        elif kind in ("tool", "state", "notice"):
            self.screen.frame_note(frame)

    async def start_turn(self, text: str) -> None:
        await self._check_alive()
        self._message_id = new_id()
        self._turn_id = None
        self._turn_outcome = None
        self._turn_end = anyio.Event()
        await self.client.send(wire.message(text=text, id=self._message_id))

    async def wait_turn(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - a ChatError with a message
        """Wait for the current turn's `done`; raise `ChatError` on its `error` or timeout.

        Returns `{"type": "approval"}` early when a question waits for the person (the turn
        is held up by it): answer it, then wait again.
        """
        turn_end = self._turn_end
        assert turn_end is not None
        with anyio.move_on_after(timeout):
            while not turn_end.is_set() and not self.questions:
                # Shared by every waiter: a Ctrl-C leaves an earlier wait running here.
                if self._attention.is_set():
                    self._attention = anyio.Event()
                await self._attention.wait()
        if self.questions and not turn_end.is_set():
            return {"type": "approval"}
        outcome = self._turn_outcome
        if outcome is None:
            raise ChatError(f"no end of the reply within {timeout:g}s (it may still be running)")
        if self._turn_end is turn_end:
            self._turn_end = None
        if outcome.get("type") == "error":
            raise ChatError(str(outcome.get("message") or outcome.get("code")), outcome)
        return outcome

    def settled(self, approval_id: str) -> dict[str, Any] | None:
        """The `approval_settled` frame of a question, once the daemon settled it."""
        return self._settled.get(approval_id)

    def next_question(self) -> dict[str, Any] | None:
        return self.questions.pop(0) if self.questions else None

    async def answer(self, approval_id: str, decision: str) -> None:
        self._answered.add(approval_id)
        await self.client.send(wire.approve(id=approval_id, decision=decision))

    async def cancel_turn(self) -> None:
        await self.client.send(wire.cancel(turn_id=self._turn_id))

    async def command(
        self,
        name: str,
        timeout: float = 30.0,  # noqa: ASYNC109 - a ChatError with a message
        args: dict[str, Any] | None = None,
    ) -> Any:
        await self._check_alive()
        command_id = new_id()
        event, box = anyio.Event(), list[dict[str, Any]]()
        self._commands[command_id] = (event, box)
        try:
            await self.client.send(wire.command(name=name, id=command_id, args=args))
            with anyio.move_on_after(timeout):
                await event.wait()
        finally:
            self._commands.pop(command_id, None)
        if not box:
            raise ChatError(f"no answer to /{name} within {timeout:g}s")
        if box[0].get("type") == "error":
            raise ChatError(str(box[0].get("message") or box[0].get("code")), box[0])
        return box[0].get("data")

    async def _check_alive(self) -> None:
        """Return once connected: at once, or when the daemon is back within `BACK_WAIT_S`."""
        if self.lost is None:
            return
        if self.reconnect:
            with anyio.move_on_after(BACK_WAIT_S):
                await self._up.wait()
            if self.lost is None:
                return
            raise ChatError(
                "not sent: the daemon is not back yet; send it again once it is "
                "(this chat reconnects and says so; Ctrl-D leaves)"
            )
        raise ChatError(self.lost)


class Screen:
    """Terminal output shared by the prompt (main thread) and the connection (portal thread)."""

    def __init__(self, out: TextIO, *, readline: Any = None) -> None:
        self.out = out
        self.notes = Notes(out)
        self.readline = readline
        self.prompt = "> " if out.isatty() else ""
        self.at_prompt = False
        self.mid_reply = False
        self._lock = threading.Lock()

    def delta(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()
            self.mid_reply = True

    def end_reply(self, text: str | None = None) -> None:
        with self._lock:
            if text and not self.mid_reply:
                self.out.write(text)
            self.out.write("\n")
            self.out.flush()
            self.mid_reply = False

    def late_reply(self, header: str, text: str) -> None:
        """Show a reply that arrives outside a turn (one the daemon kept), without breaking the prompt."""
        self._above(self.notes.line(header))
        self._above(text)

    def block(self, lines: list[str]) -> None:
        """Show several lines on their own (a question), after a reply in progress."""
        with self._lock:
            if self.mid_reply:
                self.out.write("\n")
                self.mid_reply = False
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()

    def frame_note(self, frame: dict[str, Any]) -> None:
        note = self.notes.describe(frame)
        if note:
            self._above(note)

    def note(self, text: str | None) -> None:
        if text:
            self._above(self.notes.line(text))

    def _above(self, line: str) -> None:
        """Print a line without mangling a half-typed prompt or a reply in progress."""
        with self._lock:
            if self.at_prompt and self.notes.tty:
                typed = self.readline.get_line_buffer() if self.readline else ""
                self.out.write(f"\r\x1b[K{line}\n{self.prompt}{typed}")
            elif self.mid_reply:
                self.out.write(f"\n{line}\n")
                self.mid_reply = False
            else:
                self.out.write(line + "\n")
            self.out.flush()


class InteractiveChat:
    """The interactive `reverie chat` loop (see the module docstring)."""

    def __init__(self, path: Path, *, history: Path | None, turn_timeout: float) -> None:
        self.path = path
        self.history = history
        self.turn_timeout = turn_timeout
        self.readline = _load_readline() if sys.stdin.isatty() else None
        self.screen = Screen(sys.stdout, readline=self.readline)

    def run(self) -> int:
        if sys.stdin.isatty() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            # Started by something that ignores Ctrl-C (a background launcher, `nohup`), which
            # a child inherits: at a terminal, Ctrl-C is how the person cancels a reply.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        self._load_history()
        try:
            with start_blocking_portal() as portal:
                try:
                    with portal.wrap_async_context_manager(
                        ChatSession.open(self.path, self.screen)
                    ) as session:
                        self._greet(session)
                        return self._loop(portal, session)
                except ChatError as exc:
                    raise CommandError(exc.message) from None
        finally:
            self._save_history()

    def _greet(self, session: ChatSession) -> None:
        hello = session.client.hello
        if self.screen.notes.tty:
            self.screen.note(
                f"connected: {hello.get('state', '?')}, session {hello.get('session_id', '?')}"
                " — /help for commands, Ctrl-D to leave"
            )

    def _loop(self, portal: Any, session: ChatSession) -> int:
        while True:
            self._answer_questions(portal, session)
            line = self._read_line()
            if line is None:
                return 0 if session.lost is None or session.reconnect else 1
            text = line.strip()
            if not text:
                continue
            try:
                if text.startswith("/") and not text.startswith("//"):
                    if self._slash(portal, session, text) is False:
                        return 0
                else:
                    self._turn(portal, session, text[1:] if text.startswith("//") else text)
            except ChatError as exc:
                self.screen.note(f"error: {exc.message}")
                if session.lost and not session.reconnect:
                    return 1

    def _read_line(self) -> str | None:
        self.screen.at_prompt = True
        try:
            return input(self.screen.prompt)
        except EOFError:
            if self.screen.prompt:
                print()
            return None
        except KeyboardInterrupt:
            typed = self.readline.get_line_buffer() if self.readline else ""
            print()
            # Ctrl-C over half-typed text clears it; at an empty prompt it leaves.
            return "" if typed.strip() else None
        finally:
            self.screen.at_prompt = False

    def _slash(self, portal: Any, session: ChatSession, text: str) -> bool:
        name = text[1:].split()[0].lower() if len(text) > 1 else ""
        if name in ("quit", "exit", "q"):
            return False
        if name in ("help", "h", "?", ""):
            print(HELP)
        elif name == "journal":
            words = text.split()[1:]
            if words and not words[0].isdigit():
                self.screen.note("usage: /journal [N]")
                return True
            data = portal.call(
                session.command, "journal", 30.0, {"tail": int(words[0]) if words else 10}
            )
            print(data.get("text", "") if isinstance(data, dict) else data)
        elif name == "status":
            from daemon.cli.status import render

            data = portal.call(session.command, name)
            print(render(data) if isinstance(data, dict) else data)
        elif name == "sleep":
            data = portal.call(session.command, name)
            if isinstance(data, dict) and data.get("cycle_id"):
                print(f"sleep cycle {data['cycle_id']} started; /status shows its phase")
            else:
                print(
                    data
                    if isinstance(data, str)
                    else json.dumps(data, indent=2, ensure_ascii=False)
                )
        else:
            self.screen.note(f"unknown command /{name} (try /help)")
        return True

    def _turn(self, portal: Any, session: ChatSession, text: str) -> None:
        # A Ctrl-C while the message goes out cancels the turn it starts: the sending runs on
        # (the message may be on the daemon's disk already), then the cancel follows it.
        started = portal.start_task_soon(session.start_turn, text)
        cancelled = False
        while True:
            try:
                started.result()
                break
            except KeyboardInterrupt:
                if not cancelled:
                    cancelled = True
                    self.screen.note("cancelling…")
        if cancelled:
            portal.call(session.cancel_turn)
        while True:
            try:
                done = portal.call(session.wait_turn, self.turn_timeout)
                if done.get("type") == "approval":
                    self._answer_questions(portal, session)
                    continue
            except KeyboardInterrupt:
                if cancelled:
                    raise
                cancelled = True
                self.screen.note("cancelling…")
                portal.call(session.cancel_turn)
                continue
            except ChatError:
                if self.screen.mid_reply:
                    self.screen.end_reply()
                raise
            self.screen.end_reply(str(done.get("text", "")))
            return

    def _answer_questions(self, portal: Any, session: ChatSession) -> None:
        """Put each waiting approval to the person: show it, read y / n / a, send the answer."""
        while (frame := portal.call(session.next_question)) is not None:
            self.screen.block(question(frame))
            decision = None
            while decision is None:
                try:
                    decision = parse_answer(input(PROMPT))
                except (EOFError, KeyboardInterrupt):
                    print()
                    decision = "no"  # leaving the question is declining it
            done = portal.call(session.settled, str(frame.get("id")))
            if done is not None:
                # Answered from another client, or out of time, while this one was asking.
                self.screen.note(f"{_summary(frame)}: {_settled_text(done)}")
                continue
            portal.call(session.answer, str(frame.get("id")), decision)
            self.screen.note(f"answered {decision}")

    def _load_history(self) -> None:
        if self.readline is None or self.history is None:
            return
        self.readline.set_history_length(1000)
        try:
            self.readline.read_history_file(self.history)
        except FileNotFoundError:
            pass
        except OSError as exc:
            print_err(f"cannot read chat history {self.history}: {exc.strerror or exc}")

    def _save_history(self) -> None:
        if self.readline is None or self.history is None:
            return
        try:
            self.readline.write_history_file(self.history)
            self.history.chmod(0o600)  # what was said is private
        except OSError as exc:
            print_err(f"cannot save chat history {self.history}: {exc.strerror or exc}")


def _summary(question: dict[str, Any]) -> str:
    return str(question.get("summary") or question.get("tool") or "approval")


def _settled_text(frame: dict[str, Any]) -> str:
    """How a question ended, for a client that did not answer it."""
    by = frame.get("by")
    if by == "person":
        return f"answered {frame.get('answer')} from another client"
    if by == "timeout":
        return "no answer in time — treated as no"
    return "withdrawn (the turn was cancelled)" if by == "cancelled" else "settled as no"


def _load_readline() -> Any:
    try:
        import readline
    except ImportError:  # pragma: no cover - platforms without GNU readline/libedit
        return None
    return readline
