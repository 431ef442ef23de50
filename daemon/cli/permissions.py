"""`reverie permissions [--json]` and `reverie permissions revoke TOOL MATCH`.

The policy's two lists, read from the home without the daemon: the rules configured in
`[[permissions.rules]]` and the person's saved "always" answers (`<home>/permissions.toml`).
A revoke rewrites that file (atomically); a running daemon re-reads it on its next call.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.support import CommandError, resolve_env


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    perms = subparsers.add_parser(
        "permissions",
        parents=[common],
        help="the permission rules and the saved 'always' answers; revoke one",
    )
    perms.add_argument("--json", action="store_true", help="print one JSON object")
    perms.set_defaults(func=_list)
    sub = perms.add_subparsers(dest="permissions_command", metavar="SUBCOMMAND")
    revoke = sub.add_parser(
        "revoke", parents=[common], help="remove a saved 'always' answer (asked again next time)"
    )
    revoke.add_argument("tool", help="the tool, as listed (e.g. run)")
    revoke.add_argument("match", help="the pattern, as listed (e.g. 'pytest -q')")
    revoke.set_defaults(func=_revoke)


def _list(args: argparse.Namespace) -> int:
    from daemon.tools.policy import SavedApprovals

    env = resolve_env(args, create=False)
    saved = SavedApprovals.for_home(env.home)
    rules = [r.model_dump() for r in env.settings.permissions.rules]
    answers = [{"tool": r.tool, "match": r.match, "saved_at": r.saved_at} for r in saved.rules()]
    if args.json:
        print(
            json.dumps(
                {"rules": rules, "saved": answers, "saved_file": str(saved.path)},
                ensure_ascii=False,
            )
        )
        return 0
    print("rules ([[permissions.rules]] in reverie.toml; deny > ask > allow):")
    for r in rules:
        print(f"  {r['decision']:<5}  {r['tool']}  {r['match']!r}")
    if not rules:
        print("  (none: every tool's own default decides)")
    print(f"saved 'always' answers ({saved.path}):")
    for a in answers:
        print(f"  allow  {a['tool']}  {a['match']!r}  saved {a['saved_at']}")
    if not answers:
        print("  (none)")
    if saved.problem:
        raise CommandError(saved.problem)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from daemon.tools.policy import SavedApprovals

    env = resolve_env(args, create=False)
    saved = SavedApprovals.for_home(env.home)
    if not saved.revoke(args.tool, args.match):
        raise CommandError(
            f"no saved answer for {args.tool} {args.match!r}; `reverie permissions` lists them"
        )
    print(f"revoked: {args.tool} {args.match!r} is asked again from the next call")
    return 0
