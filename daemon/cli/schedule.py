"""`reverie schedule [list [--all]] | add WHEN TEXT [--task] | cancel ID | approve ID | decline ID`.

`add` reads the time from the start of its words, quoted or not (`daemon.schedule.reading`),
and answers with how it read it. A refusal is one sentence on stderr (with `--json`, also
`{"error": {"code", "message"}}` on stdout).

With the daemon running the command goes to it (`schedule` socket command), so its timer
moves at once; with the daemon down it works on the home's database directly, and the
daemon reads the schedules when it starts (what came due meanwhile fires then, marked late).
What the person adds is theirs ("person"): it needs no approval. `approve` / `decline`
settle a schedule the agent proposed after reading text from a tool.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.locate import socket_for
from daemon.cli.support import CommandError, Env, open_database, resolve_env


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "schedule",
        parents=[common],
        help="reminders and tasks kept for you: list, add, cancel, approve",
        description="The schedules the agent keeps: list them (the default), add, cancel, approve.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_schedule, schedule_action="list", all=False)
    sub = p.add_subparsers(dest="schedule_action", metavar="ACTION")
    ls = sub.add_parser("list", parents=[common], help="the schedules kept, soonest first")
    ls.add_argument("--all", action="store_true", help="the ended ones too (done, cancelled)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    add = sub.add_parser(
        "add",
        parents=[common],
        help="add one: WHEN (e.g. 'tomorrow at 9', 'every weekday at 8:00') and TEXT",
    )
    add.add_argument(
        "words",
        nargs="+",
        metavar="WHEN TEXT",
        help="when (an ISO time or a phrase, in [scheduler] timezone), then the reminder's text"
        " (or the task); unquoted, the longest time phrase the words start with is the time",
    )
    add.add_argument(
        "--task", action="store_true", help="a task a fork does then (its result is sent to you)"
    )
    add.add_argument("--json", action="store_true", help="print JSON")
    for name, what in (
        ("cancel", "cancel a schedule (it never fires again)"),
        ("approve", "approve a schedule the agent proposed after reading a tool's text"),
        ("decline", "decline such a schedule"),
    ):
        one = sub.add_parser(name, parents=[common], help=what)
        one.add_argument("id", help="the schedule's id (s-…)")
        one.add_argument("--json", action="store_true", help="print JSON")


def _request(args: argparse.Namespace) -> dict[str, Any]:
    action = args.schedule_action or "list"
    request: dict[str, Any] = {"action": action}
    if action == "list":
        request["all"] = bool(getattr(args, "all", False))
    elif action == "add":
        request.update(words=list(args.words), task=bool(args.task))
    else:
        request["id"] = args.id
    return request


async def _from_daemon(env: Env, request: dict[str, Any]) -> dict[str, Any] | None:
    """The daemon's answer; None when no daemon runs (or it is too old to know the command)."""
    from daemon.chat.client import ChatError, command

    sock = socket_for(env.home, env.settings.chat.socket)
    if not sock.exists():
        return None
    try:
        data: dict[str, Any] = await command(sock, "schedule", request, timeout=30.0)
    except ChatError as exc:
        if exc.frame is None or exc.code == "unknown_command":
            return None
        # The person reads the daemon's sentence; the code stays in --json output.
        raise Refused(str(exc.frame.get("message") or exc.message), str(exc.code)) from None
    return data


async def _direct(env: Env, request: dict[str, Any]) -> dict[str, Any]:
    from daemon.clock import SystemClock
    from daemon.schedule.store import ScheduleError, ScheduleStore
    from daemon.schedule.tools import schedule_command
    from daemon.scheduler import local_zone

    db = await open_database(env)
    async with db:
        store = ScheduleStore(
            db,
            clock=SystemClock(),
            zone=local_zone(env.settings.scheduler.timezone),
            settings=env.settings.schedule,
        )
        try:
            return await schedule_command(store, request)
        except ScheduleError as exc:
            raise Refused(str(exc), "bad_args") from None


class Refused(CommandError):
    """The schedule command was refused: a sentence for the person and the daemon's code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.error_code = code


async def run_schedule(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    request = _request(args)
    as_json = bool(getattr(args, "json", False))
    try:
        data = await _from_daemon(env, request)
        if data is None:
            data = await _direct(env, request)
    except Refused as exc:
        if as_json:
            error = {"code": exc.error_code, "message": str(exc)}
            print(json.dumps({"error": error}, ensure_ascii=False))
        raise
    if as_json:
        print(json.dumps(data.get("schedules", data.get("schedule")), ensure_ascii=False))
        return 0
    action = request["action"]
    if action == "list":
        print(data["text"] or "no schedules kept (`reverie schedule add WHEN TEXT` adds one)")
        return 0
    if action == "add":
        print(f"scheduled {data.get('echo') or data['text']}")
        return 0
    verb = {"cancel": "cancelled", "approve": "approved", "decline": "declined"}
    print(f"{verb[action]} {data['text']}")
    return 0
