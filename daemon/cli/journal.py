"""`reverie journal [--tail N] [--day DATE] [--json]`: the journal, oldest entry first.

It reads the day files itself (`daemon.journal.commands`), so it answers with the daemon down.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.support import CommandError, resolve_env


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "journal",
        parents=[common],
        help="the journal: what the agent worked on, decided and left open",
        description="Show journal entries (written by the journal heartbeat), oldest first.",
    )
    p.add_argument(
        "--tail", type=int, default=20, metavar="N", help="the last N entries (default 20)"
    )
    p.add_argument(
        "--day", metavar="DATE", help="only this day (YYYY-MM-DD, 'today' or 'yesterday')"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per entry, one per line")
    p.set_defaults(func=run_journal)


async def run_journal(args: argparse.Namespace) -> int:
    import anyio

    from daemon.journal.commands import read_entries, render_entries

    env = resolve_env(args)
    try:
        entries = await anyio.to_thread.run_sync(
            lambda: read_entries(env.home, env.settings, tail=args.tail, day=args.day)
        )
    except ValueError as exc:
        raise CommandError(str(exc), code=2) from None
    if args.json:
        for e in entries:
            print(json.dumps(e.to_json(), ensure_ascii=False))
        return 0
    if not entries:
        where = f" for {args.day}" if args.day else ""
        print(
            f"no journal entries{where} yet (the journal heartbeat writes one when something happened)"
        )
        return 0
    print(render_entries(entries, env.settings))
    return 0
