"""`reverie handover [--preview] [--to MODEL] [--json]`: the model handover and its letter.

Without `--preview` it says what the store records: a handover waiting for its first turn,
or the last one delivered, with the self-exam scores before and after. With `--preview` it
prints the letter a switch would carry now — from the model that answered the last trunk
turn to the configured trunk model (or `--to`). It reads the home's store directly
(read-only; safe while the daemon runs) and makes no model call.
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import AsyncExitStack
from datetime import UTC, datetime

from daemon.cli.context import _open_threads, _open_view
from daemon.cli.status import status_line
from daemon.cli.support import CommandError, has_store, open_database, resolve_env


def add_commands(subparsers: object, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(  # type: ignore[attr-defined]
        "handover",
        parents=[common],
        help="the model handover: what is recorded, or the letter a switch would carry",
        description=(
            "When the trunk's model changes, its first turn on the new model carries a "
            "handover letter. Show the handover recorded, or preview the letter."
        ),
    )
    p.add_argument(
        "--preview",
        action="store_true",
        help="print the letter a switch to the configured trunk model (or --to) would carry now",
    )
    p.add_argument(
        "--to",
        default="",
        metavar="MODEL",
        help="preview a switch to this model (provider:model, e.g. anthropic:claude-opus-4-1)",
    )
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=run_handover)


async def run_handover(args: argparse.Namespace) -> int:
    # Imported when the command runs: `reverie --help` loads every command's module.
    from daemon.context.handover import (
        configured_trunk,
        handover_status,
        last_trunk_model,
        same_model,
    )
    from daemon.context.letter import build_letter

    env = resolve_env(args)
    if args.to and ":" not in args.to and args.to != "offline":
        raise CommandError(f"--to {args.to!r}: name a model as provider:model (or 'offline')")
    target = args.to or configured_trunk(env.settings, dict(os.environ))
    if not has_store(env):
        if args.preview:
            raise CommandError("nothing to hand over yet: the daemon has never run in this home")
        print(json.dumps(None) if args.json else "no handover: the daemon has never run here")
        return 0
    async with AsyncExitStack() as stack:
        db = await open_database(env, write=False)
        stack.push_async_callback(db.close)
        if not args.preview:
            info = await handover_status(db)
            last = await last_trunk_model(db)
            # A config edit the daemon has not started on yet: the next start hands over.
            upcoming = (
                {"from": last[0], "to": target}
                if last is not None
                and not same_model(last[0], target)
                and not (info and info.get("pending") and info.get("to") == target)
                else None
            )
            if args.json:
                print(json.dumps({"handover": info, "next_start": upcoming}, indent=2))
                return 0
            if info is None:
                print(f"no handover recorded; the trunk is configured for {target}")
            else:
                print(status_line(info).replace("handover:     ", "handover: ", 1))
            if upcoming:
                print(
                    f"the next start hands over: {upcoming['from']} → {upcoming['to']} "
                    "(reverie handover --preview shows the letter)"
                )
            return 0
        last = await last_trunk_model(db)
        source = last[0] if last else target
        note = ""
        if last is None:
            note = "no trunk turn answered yet in this home: the letter is for a first model"
        elif source == target:
            note = (
                f"the trunk still runs on {target}: this is the letter a switch would carry "
                "(name the new model with --to)"
            )
        view, _ = await _open_view(env, stack)
        threads = await _open_threads(env, stack)
        now = datetime.now(UTC)
        letter = await build_letter(
            from_model=source,
            to_model=target,
            until=last[1] if last else None,
            home=env.home,
            db=db,
            settings=env.settings,
            view=view,
            threads=threads,
            now=now,
        )
    if args.json:
        out = {
            "from": source,
            "to": target,
            "note": note,
            "parts": [{"key": p.key, "title": p.title, "text": p.text} for p in letter.parts],
            "text": letter.text(),
        }
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        if note:
            print(f"({note})\n")
        print(letter.text())
    return 0
