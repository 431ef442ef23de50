"""The interactive `reverie chat`: the prompt, slash commands, turns and approval questions.

The keyboard is read on the main thread; the connection is a `ChatSession` in a blocking
portal (`daemon.cli.chat_session` says why).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal

from daemon.chat.client import ChatError
from daemon.cli.approvals import PROMPT, parse_answer, question
from daemon.cli.chat_session import ChatSession, Screen, question_summary, settled_text
from daemon.cli.support import CommandError, print_err

HELP = """commands:
  /status         the daemon's state, session, context use, spend
  /sleep          start a sleep cycle now
  /journal [N]    the last N journal entries (default 10)
  /help           this help
  /quit           leave (Ctrl-D works too)
  //text          send a message that starts with '/'
Ctrl-C during a reply cancels the turn; at an empty prompt it leaves."""


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
                self.screen.note(f"{question_summary(frame)}: {settled_text(done)}")
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


def _load_readline() -> Any:
    try:
        import readline
    except ImportError:  # pragma: no cover - platforms without GNU readline/libedit
        return None
    return readline
