"""Arguments of `memory search`, `memory import`, `remember` and `recall` (standard library only).

The full CLI parser and the daemon-forwarding fast path build these subcommands from the same
definitions, and check them with the same rules, so both paths accept the same command lines
and refuse bad ones with the same message and exit code.
"""

from __future__ import annotations

from daemon.errors import ReverieError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any

KINDS = ("fact", "profile", "summary", "chunk", "month", "journal")
MODES = ("hybrid", "lexical", "vector")

REMEMBER_EPILOG = """examples:
  reverie remember "my dentist appointment is tomorrow at 10"
  reverie remember --target profile "I prefer tea to coffee"
  reverie remember --shared "our wifi password is on the fridge"
  reverie remember --correct fact:12 "the appointment moved to Friday"
  reverie remember --retract fact:12 --reason "cancelled"
  reverie remember --retract shared:3 --reason "we moved"
  reverie remember --restore fact:12
  reverie remember --pin fact:12

Relative dates are pinned at write time ("tomorrow (2026-03-04)"). Corrections and
retractions never delete: the old fact stays in history (memory/facts.jsonl; a shared
fact, shared:N, in the store's shared namespace, and the change reaches every agent).
Sleep pins your own important facts in FACTS.md; a fact the agent stored is only proposed
(MEMORY.md and the journal say so) until you confirm it with --pin; text from tools is
never pinned."""


class UsageError(ReverieError):
    """A command line that is well-formed but wrong; the message is the one line shown."""


# Each command's arguments as data: `(flags, argparse keywords)` in order. The full CLI and the
# forwarder's argparse fallback build parsers from them (`add_arguments`); the forwarder's quick
# parser (`daemon.cli.forward`) reads them directly, so there is one definition of each.
# `group` names a mutually exclusive group (not an argparse keyword).
if TYPE_CHECKING:
    Spec = tuple[tuple[tuple[str, ...], dict[str, Any]], ...]

IMPORT: Spec = (
    (("file",), {"help": 'JSONL: {"session","id","ts","role","content","speaker"?} per line'}),
    (
        ("--summarise",),
        {
            "action": "store_true",
            "help": "also summarise each imported session (calls the summariser model)",
        },
    ),
    (
        ("--no-embed",),
        {"action": "store_true", "help": "leave embedding to the daemon's background task"},
    ),
    (
        ("--json",),
        {
            "action": "store_true",
            "help": "print the counts as JSON (progress as JSON lines on stderr)",
        },
    ),
    (
        ("--no-progress",),
        {"action": "store_true", "help": "no progress bar, even on a terminal"},
    ),
)

SEARCH: Spec = (
    (("query",), {"nargs": "?", "help": "what to search for"}),
    (("--k",), {"type": int, "default": 10, "help": "how many results (default 10)"}),
    (
        ("--json",),
        {"action": "store_true", "help": "print a JSON array (one per line with --batch)"},
    ),
    (("--mode",), {"choices": MODES, "default": "hybrid"}),
    (
        ("--batch",),
        {"metavar": "FILE", "help": "one query per line; one result array per line, in order"},
    ),
    (
        ("--kind",),
        {"action": "append", "choices": KINDS, "help": "only these kinds (repeatable)"},
    ),
    (
        ("--include-retired",),
        {"action": "store_true", "help": "include superseded or retracted memories"},
    ),
    (
        ("--raw",),
        {
            "action": "store_true",
            "help": "search the text as given (no decomposition, no time words)",
        },
    ),
)

REMEMBER: Spec = (
    (
        ("text",),
        {
            "nargs": "?",
            "metavar": "TEXT",
            "help": "the fact (or the corrected text with --correct)",
        },
    ),
    (
        ("--target",),
        {
            "choices": ("memory", "profile"),
            "default": "memory",
            "help": "memory: the running log (default); profile: a stable fact about you",
        },
    ),
    (
        ("--tag",),
        {
            "action": "append",
            "default": [],
            "metavar": "TAG",
            "help": "a keyword (repeatable)",
        },
    ),
    (
        ("--shared",),
        {
            "action": "store_true",
            "help": "share the fact with every agent on this PostgreSQL store ([storage] url)",
        },
    ),
    (
        ("--correct",),
        {
            "group": "action",
            "metavar": "ID",
            "help": "supersede fact ID (fact:12, or just 12; shared:3 for every agent) with TEXT",
        },
    ),
    (
        ("--retract",),
        {
            "group": "action",
            "metavar": "ID",
            "help": "withdraw fact ID (shared:3: for every agent); it stays in history",
        },
    ),
    (
        ("--restore",),
        {
            "group": "action",
            "metavar": "ID",
            "help": "undo the retraction of fact ID (e.g. one sleep retired as stale)",
        },
    ),
    (
        ("--pin",),
        {
            "group": "action",
            "metavar": "ID",
            "help": "pin fact ID in FACTS.md (always in context): your confirmation",
        },
    ),
    (("--reason",), {"default": "", "help": "why a retracted fact no longer holds"}),
    (("--json",), {"action": "store_true", "help": "print the result as JSON"}),
)

RECALL: Spec = (
    (("query",), {"metavar": "QUERY", "help": "a question or keywords"}),
    (
        ("--json",),
        {
            "action": "store_true",
            "help": "print the answer, planner outcome and sources as JSON",
        },
    ),
)


def add_arguments(parser: argparse.ArgumentParser, spec: Spec) -> None:
    """Add `spec`'s arguments to `parser` (its mutually exclusive groups included)."""
    groups: dict[str, Any] = {}
    for flags, keywords in spec:
        kw = dict(keywords)
        group = kw.pop("group", None)
        target = parser
        if group is not None:
            if group not in groups:
                groups[group] = parser.add_mutually_exclusive_group()
            target = groups[group]
        target.add_argument(*flags, **kw)


# --- checks and requests, shared by both paths --------------------------------------------


def search_queries(args: argparse.Namespace) -> list[str]:
    """Check a `memory search` command line and return its queries (raises UsageError)."""
    if args.k <= 0:
        raise UsageError("--k must be a positive number")
    if (args.query is None) == (args.batch is None):
        raise UsageError("give either a QUERY or --batch FILE")
    if args.batch is None:
        return [args.query]
    try:
        with open(args.batch, encoding="utf-8") as fh:
            return fh.read().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {args.batch}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{args.batch} is not UTF-8 text") from None


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search options both paths pass to `ops.search_batch` (JSON-safe)."""
    return {
        "k": args.k,
        "mode": args.mode,
        "kinds": list(args.kind) if args.kind else None,
        "include_retired": bool(args.include_retired),
        "raw": bool(args.raw),
    }


def import_file(args: argparse.Namespace) -> Path:
    """Check a `memory import` command line and return the file, absolute (raises UsageError)."""
    from pathlib import Path

    path = Path(args.file).expanduser()
    if not path.is_file():
        raise UsageError(f"no such file: {args.file}")
    return path.resolve()


def remember_request(args: argparse.Namespace) -> dict[str, Any]:
    """Check a `remember` command line and return the request both paths carry out."""
    text = " ".join((args.text or "").split())
    restore = getattr(args, "restore", None)
    pin = getattr(args, "pin", None)
    if args.retract is None and restore is None and pin is None and not text:
        raise UsageError("remember needs TEXT (or --retract ID)")
    if args.retract is not None and text:
        raise UsageError("--retract takes no TEXT; give the reason with --reason")
    if restore is not None and text:
        raise UsageError("--restore takes no TEXT")
    if pin is not None and text:
        raise UsageError("--pin takes no TEXT")
    from daemon.memory.ids import fact_uid

    def uid(given: str | None) -> str | None:
        # The bare number shown next to `fact:2` names it too.
        return None if given is None else fact_uid(given)

    return {
        "text": text,
        "target": args.target,
        "tags": list(args.tag),
        "correct": uid(args.correct),
        "retract": uid(args.retract),
        "restore": uid(restore),
        "pin": uid(pin),
        "reason": args.reason,
        "shared": bool(getattr(args, "shared", False)),
    }


def recall_query(args: argparse.Namespace) -> str:
    if not args.query.strip():
        raise UsageError("recall needs a non-empty QUERY")
    return str(args.query)
