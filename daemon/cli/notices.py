"""`reverie notices [--all] [--ack ID… | --ack-all] [--json]`: what the agent told the person.

It reads and acknowledges the outbox in the database itself (`daemon.schedule.outbox`), so
it answers with the daemon down; an acknowledgement made while the daemon runs is seen by
it at once (an acknowledged notice is never pushed again). Without options: the notices not
yet acknowledged, oldest first, each marked `new` (no client has received it yet) or `seen`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.support import CommandError, Env, open_database, resolve_env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from daemon.schedule.outbox import Notice

# `--all` shows at most this many, the newest.
ALL_LIMIT = 100


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "notices",
        parents=[common],
        help="what the agent told you unasked: reminders, task results, greetings",
        description="List the notices not yet acknowledged (oldest first), or acknowledge them.",
    )
    p.add_argument(
        "--all", action="store_true", help=f"the newest {ALL_LIMIT} notices, acknowledged too"
    )
    ack = p.add_mutually_exclusive_group()
    ack.add_argument("--ack", nargs="+", metavar="ID", help="acknowledge these notices")
    ack.add_argument(
        "--ack-all", action="store_true", help="acknowledge every notice not yet acknowledged"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per notice, one per line")
    p.set_defaults(func=run_notices)


def _state(notice: Notice) -> str:
    if notice.acknowledged_at is not None:
        return "acked"
    return "new" if notice.delivered_at is None else "seen"


def _json(notice: Notice) -> dict[str, Any]:
    return {
        "id": notice.id,
        "kind": notice.kind,
        "text": notice.text,
        "state": _state(notice),
        "ts": notice.created_at.isoformat(),
        "due_at": notice.due_at.isoformat() if notice.due_at else None,
        "late_s": notice.late_s or None,
        "schedule_id": notice.schedule_id,
        "source": notice.source,
    }


def render(notices: list[Notice], env: Env) -> str:
    from daemon.clock import local_zone

    zone = local_zone(env.settings.scheduler.timezone)
    lines = []
    for n in notices:
        when = (n.due_at or n.created_at).astimezone(zone).strftime("%Y-%m-%d %H:%M")
        late = f" ({round(n.late_s / 60)} min late)" if n.late_s >= 60 else ""
        head = f"{n.id}  {when}  {_state(n):<5}  {n.kind}{late}"
        body = "\n".join("    " + line for line in n.text.splitlines())
        lines.append(f"{head}\n{body}")
    return "\n".join(lines)


async def run_notices(args: argparse.Namespace) -> int:
    from daemon.bus import EventBus
    from daemon.clock import SystemClock
    from daemon.schedule.outbox import Outbox

    env = resolve_env(args)
    db = await open_database(env)
    async with db:
        outbox = Outbox(db, bus=EventBus("notices-cli"), clock=SystemClock())
        if args.ack or args.ack_all:
            if args.ack_all:
                ids = [n.id for n in await outbox.unacknowledged()]
            else:
                ids = list(dict.fromkeys(args.ack))
                unknown = [i for i in ids if await outbox.get(i) is None]
                if unknown:
                    raise CommandError(f"no notice {', '.join(unknown)} (see `reverie notices`)")
            done = await outbox.acknowledge(ids)
            print(f"acknowledged {done} notice{'s' if done != 1 else ''}")
            return 0
        notices = await outbox.recent(ALL_LIMIT) if args.all else await outbox.unacknowledged()
    if args.json:
        for n in notices:
            print(json.dumps(_json(n), ensure_ascii=False))
        return 0
    if not notices:
        print("no notices" + ("" if args.all else " waiting (`--all` shows the acknowledged too)"))
        return 0
    print(render(notices, env))
    return 0
