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

from daemon.cli.support import CommandError, resolve_env
from daemon.memory.facts import Fact, FactLog, local_timezone
from daemon.store.db import Database


def _status(fact: Fact) -> str:
    if fact.superseded_by:
        return f"changed: superseded by {fact.superseded_by}"
    if fact.retired_at is not None:
        return f"retired: {fact.reason or 'retracted'}"
    return "current"


def _json(fact: Fact, uses: dict[str, tuple[int, str | None]]) -> dict[str, Any]:
    n, last = uses.get(fact.id, (0, None))
    return {
        "id": fact.id,
        "text": fact.text,
        "target": fact.target,
        "source": fact.source,
        "origin": fact.origin,
        "status": _status(fact),
        "subject": fact.subject or None,
        "attribute": fact.attribute or None,
        "value": fact.value or None,
        "valid_from": fact.valid_since.isoformat(),
        "invalid_from": fact.invalid_from.isoformat() if fact.invalid_from else None,
        "supersedes": fact.supersedes,
        "superseded_by": fact.superseded_by,
        "session": fact.session,
        "message_ids": list(fact.message_ids),
        "uses": n,
        "last_used": last,
        "pinned": fact.pin_confirmed_at is not None,
    }


def _line(fact: Fact, uses: dict[str, tuple[int, str | None]], tz: Any) -> str:
    since = fact.valid_since.astimezone(tz).date().isoformat()
    until = fact.invalid_from.astimezone(tz).date().isoformat() if fact.invalid_from else "now"
    told = "mined" if fact.mined else "told"
    where = f" from {fact.session} ({', '.join(fact.message_ids)})" if fact.session else ""
    n = uses.get(fact.id, (0, None))[0]
    used = f"; recalled {n}×" if n else ""
    state = "" if fact.active else f"; {_status(fact)}"
    return f"[{fact.id}] {since} → {until}  {fact.text}\n    ({told}, {fact.origin}{where}{used}{state})"


async def _uses(env: Any) -> dict[str, tuple[int, str | None]]:
    if not env.home.db_file.exists():
        return {}
    db = await Database.open(env.home.db_file, readonly=True, migrate=False)
    try:
        rows = await db.fetchall(
            "SELECT uid, uses, last_used FROM memories WHERE kind IN ('fact', 'profile')"
        )
    except Exception:  # a database not yet migrated to count uses: show none
        return {}
    finally:
        await db.close()
    return {r[0]: (int(r[1] or 0), r[2]) for r in rows}


async def facts(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    log = FactLog(env.home.memory_dir / "facts.jsonl")
    await anyio.to_thread.run_sync(log.refresh)
    if args.history:
        uid = args.history.strip()
        if uid not in log.facts:
            raise CommandError(
                f"no fact with id {uid!r} (ids look like fact:12; see reverie memory facts)"
            )
        chain = _chain(log, uid)
    else:
        chain = [f for f in log.facts.values() if args.all or f.active]
    uses = await _uses(env)
    if args.json:
        print(json.dumps([_json(f, uses) for f in chain], ensure_ascii=False))
        return 0
    tz = local_timezone(env.settings)
    if not chain:
        print("no facts yet" if not args.all else "no facts at all yet")
        return 0
    if args.history:
        print(f"history of {args.history.strip()} ({len(chain)} value(s), oldest first):")
    sys.stdout.write("\n".join(_line(f, uses, tz) for f in chain) + "\n")
    return 0


def _chain(log: FactLog, uid: str) -> list[Fact]:
    """The facts superseded by and superseding `uid`, oldest first."""
    fact = log.facts[uid]
    chain = [fact]
    seen = {uid}
    while (
        chain[0].supersedes and chain[0].supersedes in log.facts and chain[0].supersedes not in seen
    ):
        chain.insert(0, log.facts[chain[0].supersedes])
        seen.add(chain[0].id)
    while (
        chain[-1].superseded_by
        and chain[-1].superseded_by in log.facts
        and chain[-1].superseded_by not in seen
    ):
        chain.append(log.facts[chain[-1].superseded_by])
        seen.add(chain[-1].id)
    return chain
