"""`reverie chat`: talk to the running daemon, one message (`-m`) or interactively.

A tool call that needs the person's approval shows up as an `approval` frame: the
interactive client shows it inline (the tool, what it acts on, its diff) and reads y / n / a;
`chat -m` answers at once — yes when an `--approve` pattern covers the call, else no.

A `notice` (a reminder, a task's result, the morning greeting) is shown as it comes; what
came while nobody was connected arrives right after `hello`, so a chat opens with it
(`chat -m` writes notices to stderr, keeping stdout the reply). Once a notice is printed the
client answers `seen` with its id: only then does the daemon count it delivered.

The parts: `chat_notes` (side lines: tools, state, notices), `chat_one` (`chat -m`),
`chat_session` (the interactive client's connection and screen) and `chat_interactive` (its
prompt loop). This module holds the command and imports the part it runs.
"""

from __future__ import annotations

import sys
from typing import Any

# What both clients share, importable from here too.
from daemon.cli.chat_notes import EXIT_SAVED as EXIT_SAVED
from daemon.cli.chat_notes import Notes as Notes

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse


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
    from daemon.cli.approvals import parse_pre_approvals
    from daemon.cli.locate import socket_for
    from daemon.cli.support import CommandError, resolve_env

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
        from daemon.cli.chat_one import send_one

        return send_one(path, text, timeout=timeout, approvals=approvals)
    if approvals:
        raise CommandError("--approve goes with -m (an interactive chat asks you)", code=2)
    history = env.home.root / ".chat_history" if env.home.root.is_dir() else None
    from daemon.cli.chat_interactive import InteractiveChat

    return InteractiveChat(path, history=history, turn_timeout=timeout).run()
