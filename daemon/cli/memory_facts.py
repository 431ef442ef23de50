"""`reverie memory facts [--all | --history ID] [--json]`: the facts, and how one has changed.

Read from `memory/facts.jsonl` (the source of truth), so it works with or without the daemon;
how often each fact was recalled comes from the database when there is one. Each fact says
whether it was told (someone asked to keep it) or mined (sleep found it said in passing), whose
word it is, and since when it holds; `--history ID` shows the chain of values through a fact,
oldest first, each with the time it held from and until.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from daemon.cli.support import CommandError, has_store, open_database, resolve_env
from daemon.memory.fact_history import Uses, fact_chain, fact_json, fact_status, fact_uses
from daemon.memory.facts import Fact, FactLog, local_timezone
from daemon.memory.ids import fact_uid


def _line(fact: Fact, uses: Uses, tz: Any) -> str:
    since = fact.valid_since.astimezone(tz).date().isoformat()
    until = fact.invalid_from.astimezone(tz).date().isoformat() if fact.invalid_from else "now"
    told = "mined" if fact.mined else "told"
    where = f" from {fact.session} ({', '.join(fact.message_ids)})" if fact.session else ""
    n = uses.get(fact.id, (0, None))[0]
    used = f"; recalled {n}×" if n else ""
    state = "" if fact.active else f"; {fact_status(fact)}"
    return f"[{fact.id}] {since} → {until}  {fact.text}\n    ({told}, {fact.origin}{where}{used}{state})"


async def _uses(env: Any) -> Uses:
    if not has_store(env):
        return {}
    db = await open_database(env, write=False)
    try:
        return await fact_uses(db)
    finally:
        await db.close()


async def facts(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    log = FactLog(env.home.memory_dir / "facts.jsonl")
    await anyio.to_thread.run_sync(log.refresh)
    if args.history:
        uid = fact_uid(args.history)
        if uid not in log.facts:
            raise CommandError(
                f"no fact with id {uid!r} (ids look like fact:12; see reverie memory facts)"
            )
        chain = fact_chain(log, uid)
    else:
        chain = [f for f in log.facts.values() if args.all or f.active]
    uses = await _uses(env)
    if args.json:
        print(json.dumps([fact_json(f, uses) for f in chain], ensure_ascii=False))
        return 0
    tz = local_timezone(env.settings)
    if not chain:
        print("no facts yet" if not args.all else "no facts at all yet")
        return 0
    if args.history:
        print(f"history of {fact_uid(args.history)} ({len(chain)} value(s), oldest first):")
    sys.stdout.write("\n".join(_line(f, uses, tz) for f in chain) + "\n")
    return 0
