"""`reverie sleep [--wait]`, `reverie sleep list`, `reverie sleep show [ID]`, `reverie sleep revert ID [--change N]`.

`sleep` with no subcommand asks the running daemon to start a cycle now. The others open the
home's database directly (WAL: safe while the daemon runs), as `reverie dreams` does: `list`
and `show` only read; `revert` undoes one recorded change or a whole cycle's (and its dream
revisions) through the home's memory, and records the revert.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from daemon.cli.locate import socket_for
from daemon.cli.support import CommandError, Env, has_store, has_table, open_database, resolve_env

# How `show` and `list` name the kinds of change, in the order `show` counts them.
KIND_LABELS = {
    "fact_mined": "fact mined",
    "fact_superseded": "fact superseded",
    "fact_retired": "fact retired",
    "fact_promoted": "fact promoted",
    "month_folded": "month folded",
    "summary_folded": "summary folded",
    "shared_fact_folded": "shared duplicate",
    "shared_fact_superseded": "shared superseded",
    "shared_fact_retired": "shared retired",
    "reverted": "reverted",
}
_COUNT_WORDS = {
    "fact_mined": "mined",
    "fact_superseded": "superseded",
    "fact_retired": "retired",
    "fact_promoted": "promoted",
    "month_folded": "months folded",
    "summary_folded": "summaries folded",
    "shared_fact_folded": "shared duplicates folded",
    "shared_fact_superseded": "shared superseded",
    "shared_fact_retired": "shared retired",
    "reverted": "reverted",
}


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "sleep", parents=[common], help="start a sleep cycle now; list, show or revert cycles"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the cycle to finish and print what each phase did",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="with --wait, give up waiting after S seconds (default 600)",
    )
    p.set_defaults(func=cmd_sleep)
    cycles = p.add_subparsers(dest="sleep_command", metavar="SUBCOMMAND")
    listed = cycles.add_parser("list", parents=[common], help="recent cycles and what each changed")
    listed.add_argument(
        "--limit", type=int, default=20, metavar="N", help="the last N cycles (default 20)"
    )
    listed.add_argument("--json", action="store_true", help="print a JSON array")
    listed.set_defaults(func=cmd_list)
    show = cycles.add_parser(
        "show", parents=[common], help="one cycle: phases, timings and its change set"
    )
    show.add_argument("id", nargs="?", help="a cycle id as listed (default: the last cycle)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(func=cmd_show)
    revert = cycles.add_parser(
        "revert", parents=[common], help="undo a cycle's changes, or one of them (--change N)"
    )
    revert.add_argument("id", help="a cycle id as listed, e.g. sleep-20260105-030000-1a2b3c")
    revert.add_argument(
        "--change", type=int, metavar="N", help="undo only change #N (as `sleep show` numbers it)"
    )
    revert.add_argument("--json", action="store_true", help="print what was reverted as JSON")
    revert.set_defaults(func=cmd_revert)


def _socket(env: Env) -> Path:
    return socket_for(env.home, env.settings.chat.socket)


async def cmd_sleep(args: argparse.Namespace) -> int:
    from daemon.chat.client import ChatError, command

    env = resolve_env(args)
    try:
        if args.wait:
            data = await command(_socket(env), "sleep", {"wait": True}, timeout=args.timeout)
        else:
            data = await command(_socket(env), "sleep", timeout=30.0)
    except ChatError as exc:
        raise CommandError(str(exc)) from None
    if args.wait:
        print(
            f"slept: {data.get('old_session_id')} → {data.get('new_session_id') or '(same session)'}"
        )
        for name, step in (data.get("steps") or {}).items():
            print(f"  {name:<12} {step.get('status'):<9} {step.get('changed', '')}")
        if data.get("cycle_id"):
            counts = _counts_line(data.get("changes") or {})
            print(f"changes: {counts} (reverie sleep show {data['cycle_id']})")
    else:
        print(f"sleep cycle {data.get('cycle_id')} started; `reverie status` shows its phase")
    return 0


def _counts_line(counts: dict[str, int]) -> str:
    parts = [f"{counts[k]} {w}" for k, w in _COUNT_WORDS.items() if counts.get(k)]
    return ", ".join(parts) or "no memory changes"


async def cmd_list(args: argparse.Namespace) -> int:
    from daemon.sleep.changes import change_counts
    from daemon.sleep.checkpoints import Checkpoints

    env = resolve_env(args)
    if args.limit <= 0:
        raise CommandError("--limit must be a positive number")
    db = await open_database(env, write=False) if has_store(env) else None
    out: list[dict[str, Any]] = []
    if db is not None:
        async with db:
            if await has_table(db, "sleep_changes"):
                records = await Checkpoints(db).cycles(limit=args.limit)
                counts = await change_counts(db, [r.id for r in records])
                for r in records:
                    out.append(
                        {
                            "cycle_id": r.id,
                            "reason": r.reason,
                            "status": r.status,
                            "started_at": r.started_at.isoformat(),
                            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
                            "changes": counts.get(r.id, {}),
                        }
                    )
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    if not out:
        print("(no sleep cycles yet)")
    for c in out:
        when = c["started_at"][:16].replace("T", " ")
        print(
            f"{c['cycle_id']}  {when}  {c['reason']:<10} {c['status']:<7}  {_counts_line(c['changes'])}"
        )
    return 0


def _change_line(change: dict[str, Any]) -> str:
    label = KIND_LABELS.get(change["kind"], change["kind"])
    note = f" — {change['note']}" if change["note"] else ""
    undone = (
        f"  [reverted by #{change['reverted_by']} at {change['reverted_at']}]"
        if change["reverted_at"]
        else ""
    )
    return f"  #{change['change']:<3} {label:<16} {change['target']}{note}{undone}"


async def cmd_show(args: argparse.Namespace) -> int:
    from daemon.sleep.changes import cycle_view

    env = resolve_env(args)
    db = await open_database(env, write=False) if has_store(env) else None
    view = None
    if db is not None:
        async with db:
            if await has_table(db, "sleep_changes"):
                view = await cycle_view(db, env.home, args.id)
    if view is None:
        raise CommandError(
            f"no sleep cycle {args.id!r}; `reverie sleep list` lists them"
            if args.id
            else "no sleep cycle yet; `reverie sleep` starts one"
        )
    if args.json:
        print(json.dumps(view, ensure_ascii=False))
        return 0
    finished = (view["finished_at"] or "unfinished")[:19].replace("T", " ")
    print(
        f"{view['cycle_id']} ({view['reason']}) {view['status']}: "
        f"{view['started_at'][:19].replace('T', ' ')} → {finished}; "
        f"trunk {view['old_session_id']} → {view['new_session_id'] or '(same session)'}"
    )
    if view["woke_early"] or view["deferred"]:
        deferred = ", ".join(view["deferred"]) or "nothing"
        print(f"woke early; deferred to the next sleep: {deferred}")
    print("phases:")
    for phase in view["phases"]:
        seconds = phase["seconds"]
        took = (
            "-"
            if seconds is None
            else f"{seconds:.1f} s"
            if seconds >= 1
            else f"{seconds * 1000:.0f} ms"
        )
        print(f"  {phase['phase']:<12} {phase['status']:<9} {took:>8}  {phase['changed']}")
    changes = view["changes"]
    counts: dict[str, int] = {}
    for c in changes:
        counts[c["kind"]] = counts.get(c["kind"], 0) + 1
    revisions = view["dream_revisions"]
    dreams = f"; {len(revisions)} dream revision(s)" if revisions else ""
    print(f"changes: {_counts_line(counts)}{dreams}")
    for c in changes:
        print(_change_line(c))
    for r in revisions:
        why = f" — {r['reason']}" if r["reason"] else ""
        print(f"  {r['id']}  dream {r['status']:<8} {r['kind']} {r['target']}{why}")
    if any(not c["reverted_at"] and c["kind"] != "reverted" for c in changes) or any(
        r["status"] == "applied" for r in revisions
    ):
        print(f"undo: reverie sleep revert {view['cycle_id']} [--change N]")
    return 0


async def cmd_revert(args: argparse.Namespace) -> int:
    from daemon.cli.memory_direct import open_memory
    from daemon.clock import SystemClock
    from daemon.sleep.changes import ChangeError
    from daemon.sleep.revert import ChangeReverter

    env = resolve_env(args)
    if not has_store(env):
        raise CommandError(f"no sleep cycle {args.id!r}; `reverie sleep list` lists them")
    async with open_memory(env, models=False) as memory:
        reverter = ChangeReverter(
            home=env.home, db=memory.db, memory=memory, settings=env.settings, clock=SystemClock()
        )
        try:
            done = await reverter.revert(args.id, change=args.change)
        except ChangeError as exc:
            raise CommandError(str(exc)) from None
        await memory.index.flush()
    if args.json:
        print(json.dumps(done.to_json(), ensure_ascii=False))
        return 0
    for change, record in done.undone:
        print(f"reverted #{change.seq} {KIND_LABELS.get(change.kind, change.kind)} "
              f"{change.target}: {record.note.split(': ', 1)[-1]} (recorded as #{record.seq})")  # fmt: skip
    for rev in done.dream_revisions:
        print(f"reverted dream revision {rev}")
    for problem in done.not_reverted:
        print(f"not reverted: {problem}")
    return 0
