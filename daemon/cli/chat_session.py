"""The interactive chat's connection and screen.

The interactive client reads the keyboard with `input()` on the main thread — the only
thread where Ctrl-C interrupts readline cleanly and the terminal is restored — while the
connection lives on an event loop in a blocking portal's thread (`ChatSession`). So reading
stdin never blocks the loop: `state` frames arrive and are shown while the prompt waits,
through `Screen`, which both threads write to. The connection outlives the daemon: when it
stops, the chat says so in one line and connects again once a daemon answers on the same
socket, saying so.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio

from daemon.chat import wire
from daemon.chat.client import ChatClient, ChatError, MessageSaved, new_id
from daemon.cli.chat_notes import Notes

# The interactive chat, once the daemon is gone: how often it tries to connect again, how long
# each try may take, and how long a message typed meanwhile waits for the daemon to be back.
RECONNECT_EVERY_S = 0.5
CONNECT_TIMEOUT_S = 5.0
BACK_WAIT_S = 3.0


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
                self.screen.note(f"{question_summary(waiting[0])}: {settled_text(frame)}")
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


def question_summary(question: dict[str, Any]) -> str:
    """What an approval question asks about, in a few words."""
    return str(question.get("summary") or question.get("tool") or "approval")


def settled_text(frame: dict[str, Any]) -> str:
    """How a question ended, for a client that did not answer it."""
    by = frame.get("by")
    if by == "person":
        return f"answered {frame.get('answer')} from another client"
    if by == "timeout":
        return "no answer in time — treated as no"
    return "withdrawn (the turn was cancelled)" if by == "cancelled" else "settled as no"
