"""`reverie remember` and `reverie recall`: the person's side of explicit memory.

Both open the home directly (safe while the daemon runs: the facts log is appended under a
file lock and the database is in WAL mode). Facts written here have origin `person`.

    reverie remember TEXT [--target memory|profile] [--tag T]...   store a fact
    reverie remember --correct ID TEXT                             supersede fact ID
    reverie remember --retract ID [--reason WHY]                   withdraw fact ID
    reverie recall QUERY [--json]                                  the recall tool, as the agent sees it
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from daemon.cli_support import CommandError, Env, resolve_env
from daemon.clock import SystemClock
from daemon.store.db import Database

REMEMBER_EPILOG = """examples:
  reverie remember "my dentist appointment is tomorrow at 10"
  reverie remember --target profile "I prefer tea to coffee"
  reverie remember --correct fact:12 "the appointment moved to Friday"
  reverie remember --retract fact:12 --reason "cancelled"

Relative dates are pinned at write time ("tomorrow (2026-03-04)"). Corrections and
retractions never delete: the old fact stays in history (memory/facts.jsonl)."""


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    remember = subparsers.add_parser(
        "remember",
        parents=[common],
        help="store an explicit fact (or --correct / --retract one)",
        epilog=REMEMBER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    remember.add_argument("text", nargs="?", metavar="TEXT", help="the fact (or the corrected text with --correct)")
    remember.add_argument("--target", choices=("memory", "profile"), default="memory",
                          help="memory: the running log (default); profile: a stable fact about you")
    remember.add_argument("--tag", action="append", default=[], metavar="TAG", help="a keyword (repeatable)")
    action = remember.add_mutually_exclusive_group()
    action.add_argument("--correct", metavar="ID", help="supersede fact ID (e.g. fact:12) with TEXT")
    action.add_argument("--retract", metavar="ID", help="withdraw fact ID; it stays in history")
    remember.add_argument("--reason", default="", help="why a retracted fact no longer holds")
    remember.add_argument("--json", action="store_true", help="print the result as JSON")
    remember.set_defaults(func=_remember)

    recall = subparsers.add_parser("recall", parents=[common], help="answer from memory with citations (the recall tool)")
    recall.add_argument("query", metavar="QUERY", help="a question or keywords")
    recall.add_argument("--json", action="store_true", help="print the answer, planner outcome and sources as JSON")
    recall.set_defaults(func=_recall)


@asynccontextmanager
async def _memory(env: Env) -> AsyncIterator[Any]:
    from daemon.memory.system import MemorySystem
    from daemon.models.ledger import UsageLedger
    from daemon.models.roles import ModelRoles

    try:
        db = await Database.open(env.home.db_file, busy_timeout_ms=env.settings.store.busy_timeout_ms)
    except Exception as exc:
        raise CommandError(f"cannot open the memory database {env.home.db_file}: {exc}") from None
    try:
        clock = SystemClock()
        async with ModelRoles(env.settings, UsageLedger(db, env.settings.spend, clock)) as roles:
            system = MemorySystem(
                home=env.home, db=db, settings=env.settings, roles=roles, bus=None, clock=clock, background=False
            )
            async with system:
                yield system
    finally:
        await db.close()


async def _remember(args: argparse.Namespace) -> int:
    from daemon.memory.facts import FactError

    text = " ".join((args.text or "").split())
    if args.retract is None and not text:
        raise CommandError("remember needs TEXT (or --retract ID)")
    if args.retract is not None and text:
        raise CommandError("--retract takes no TEXT; give the reason with --reason")
    env = resolve_env(args)
    async with _memory(env) as memory:
        try:
            if args.retract is not None:
                await memory.retract(args.retract, reason=args.reason or "retracted by the person", origin="person")
                out: dict[str, Any] = {"status": "retracted", "id": args.retract, "message": f"{args.retract} retracted"}
            elif args.correct is not None:
                out = (await memory.correct(args.correct, text, origin="person")).__dict__
            else:
                out = (await memory.remember(text, target=args.target, origin="person", tags=args.tag)).__dict__
        except FactError as exc:
            raise CommandError(str(exc)) from None
        await memory.index.flush()
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    elif out["status"] in ("stored", "corrected"):
        print(f"{out['message']}: {out['text']}")
    else:
        print(out["message"])
    return 0


async def _recall(args: argparse.Namespace) -> int:
    from daemon.memory.recall import RecallError

    if not args.query.strip():
        raise CommandError("recall needs a non-empty QUERY")
    env = resolve_env(args)
    async with _memory(env) as memory:
        try:
            result = await memory.recall_result(args.query)
        except RecallError as exc:
            raise CommandError(str(exc)) from None
    if args.json:
        data = result.to_json()
        data["text"] = result.render(env.settings.memory.recall_max_bytes)
        print(json.dumps(data, ensure_ascii=False))
    else:
        print(result.render(env.settings.memory.recall_max_bytes))
    return 0
