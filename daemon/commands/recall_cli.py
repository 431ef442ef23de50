"""`reverie remember` and `reverie recall`: the person's side of explicit memory.

When a daemon runs, both are answered by it over the socket (`daemon.cli.forward`);
otherwise they open the home directly (the facts log is appended under a file lock and the
database is in WAL mode). Facts written here have origin `person`.

    reverie remember TEXT [--target memory|profile] [--tag T]...   store a fact
    reverie remember --correct ID TEXT                             supersede fact ID
    reverie remember --retract ID [--reason WHY]                   withdraw fact ID
    reverie remember --pin ID                                      pin fact ID in FACTS.md
    reverie recall QUERY [--json]                                  the recall tool, as the agent sees it
"""

from __future__ import annotations

import argparse
import sys

from daemon.cli.support import CommandError, resolve_env
from daemon.commands import args as spec
from daemon.commands import ops, render
from daemon.commands.memory_cli import open_memory


async def remember(args: argparse.Namespace) -> int:
    from daemon.memory.facts import FactError

    try:
        request = spec.remember_request(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    async with open_memory(env, models=True) as memory:
        try:
            out = await ops.remember(memory, request)
        except FactError as exc:
            raise CommandError(str(exc)) from None
        await memory.index.flush()
    render.remember_result(out, as_json=args.json, out=sys.stdout)
    return 0


async def recall(args: argparse.Namespace) -> int:
    from daemon.memory.recall import RecallError

    try:
        query = spec.recall_query(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    async with open_memory(env, models=True) as memory:
        try:
            data = await ops.recall(memory, query)
        except RecallError as exc:
            raise CommandError(str(exc)) from None
    render.recall_answer(data, as_json=args.json, out=sys.stdout)
    return 0
