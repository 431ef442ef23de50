"""`reverie schedule [list [--all]] | add WHEN TEXT [--task] | cancel ID | approve ID | decline ID`.

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
    add.add_argument("when", help="an ISO time or a phrase, in [scheduler] timezone")
    add.add_argument("text", nargs="+", help="the reminder's text (or the task)")
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
        request.update(when=args.when, text=" ".join(args.text), task=bool(args.task))
    else:
        request["id"] = args.id
    return request


async def _from_daemon(env: Env, request: dict[str, Any]) -> dict[str, Any] | None:
    """The daemon's answer; None when no daemon runs (or it is too old to know the command)."""
    from daemon.chat.client import ChatError, command

    sock = env.home.socket_path(env.settings.chat.socket)
    if not sock.exists():
        return None
    try:
        data: dict[str, Any] = await command(sock, "schedule", request, timeout=30.0)
    except ChatError as exc:
        if exc.frame is None or exc.code == "unknown_command":
            return None
        raise CommandError(exc.message) from None
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
            raise CommandError(str(exc)) from None


async def run_schedule(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    request = _request(args)
    data = await _from_daemon(env, request)
    if data is None:
        data = await _direct(env, request)
    if getattr(args, "json", False):
        print(json.dumps(data.get("schedules", data.get("schedule")), ensure_ascii=False))
        return 0
    action = request["action"]
    if action == "list":
        print(data["text"] or "no schedules kept (`reverie schedule add WHEN TEXT` adds one)")
        return 0
    verb = {"add": "scheduled", "cancel": "cancelled", "approve": "approved", "decline": "declined"}
    print(f"{verb[action]} {data['text']}")
    return 0
