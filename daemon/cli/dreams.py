"""`reverie dreams [--json]`, `reverie dreams show ID`, `reverie dreams revert ID [--force]`.

They open the home's database directly (WAL: safe while the daemon runs). Listing and
showing only read; a revert writes the previous version of the files back (atomically) and
marks the revision reverted — a running daemon's topic watcher picks the files up.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.support import CommandError, Env, has_store, has_table, open_database, resolve_env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from daemon.sleep.revisions import Revision


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    dreams = subparsers.add_parser(
        "dreams", parents=[common], help="what dreams changed in the topic addenda; revert"
    )
    dreams.add_argument(
        "--json", action="store_true", help="print a JSON array (with each revision's diff)"
    )
    dreams.add_argument(
        "--limit", type=int, default=50, metavar="N", help="the last N revisions (default 50)"
    )
    dreams.set_defaults(func=_list)
    sub = dreams.add_subparsers(dest="dreams_command", metavar="SUBCOMMAND")
    show = sub.add_parser("show", parents=[common], help="one revision with its diff")
    show.add_argument("id", help="a revision id as listed, e.g. d-1a2b3c4d")
    show.set_defaults(func=_show)
    revert = sub.add_parser(
        "revert", parents=[common], help="undo one revision (restore the previous version)"
    )
    revert.add_argument("id", help="a revision id as listed, e.g. d-1a2b3c4d")
    revert.add_argument(
        "--force", action="store_true", help="overwrite edits made to the files since the revision"
    )
    revert.set_defaults(func=_revert)


def _line(rev: Revision) -> str:
    when = rev.created_at[:16].replace("T", " ")
    reason = f" — {rev.reason}" if rev.reason else ""
    return f"{rev.id}  {when}  {rev.status:<8}  {rev.kind:<9} {rev.target}{reason}"


async def _list(args: argparse.Namespace) -> int:
    from daemon.sleep.revisions import RevisionStore

    env = resolve_env(args)
    if args.limit <= 0:
        raise CommandError("--limit must be a positive number")
    db = await open_database(env, write=False) if has_store(env) else None
    revisions: list[Revision] = []
    if db is not None:
        async with db:
            if await has_table(db, "dream_revisions"):
                revisions = await RevisionStore(env.home, db).recent(limit=args.limit)
    if args.json:
        print(json.dumps([r.to_json() for r in revisions], ensure_ascii=False))
        return 0
    if not revisions:
        print("(no dream revisions yet)")
    for rev in revisions:
        print(_line(rev))
    return 0


async def _get(env: Env, rev_id: str) -> Revision:
    from daemon.sleep.revisions import RevisionStore

    db = await open_database(env, write=False) if has_store(env) else None
    if db is None:
        raise CommandError(f"no dream revision {rev_id!r}; `reverie dreams` lists them")
    async with db:
        rev = (
            await RevisionStore(env.home, db).get(rev_id)
            if await has_table(db, "dream_revisions")
            else None
        )
    if rev is None:
        raise CommandError(f"no dream revision {rev_id!r}; `reverie dreams` lists them")
    return rev


async def _show(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    rev = await _get(env, args.id)
    print(_line(rev))
    if rev.sources:
        print(f"sources: {', '.join(rev.sources)}")
    if rev.reverted_at:
        print(f"reverted at {rev.reverted_at}")
    print()
    print(rev.diff, end="" if rev.diff.endswith("\n") else "\n")
    return 0


async def _revert(args: argparse.Namespace) -> int:
    from daemon.clock import SystemClock
    from daemon.sleep.revisions import RevisionError, RevisionStore

    env = resolve_env(args)
    db = await open_database(env) if has_store(env) else None
    if db is None:
        raise CommandError(f"no dream revision {args.id!r}; `reverie dreams` lists them")
    async with db:
        try:
            rev = await RevisionStore(env.home, db).revert(
                args.id, now=SystemClock().now(), force=args.force
            )
        except RevisionError as exc:
            raise CommandError(str(exc)) from None
    paths = ", ".join(f.path for f in rev.files)
    print(f"reverted {rev.id}: {paths} restored to the version before the dream")
    return 0
