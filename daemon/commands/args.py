"""Arguments of `memory search`, `memory import`, `remember` and `recall` (standard library only).

The full CLI parser and the daemon-forwarding fast path build these subcommands from the same
definitions, and check them with the same rules, so both paths accept the same command lines
and refuse bad ones with the same message and exit code.
"""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

KINDS = ("fact", "profile", "summary", "chunk", "month", "journal")
MODES = ("hybrid", "lexical", "vector")
# Queries sent to the daemon per command frame (and embedded per batch on the direct path).
BATCH_QUERIES = 256

REMEMBER_EPILOG = """examples:
  reverie remember "my dentist appointment is tomorrow at 10"
  reverie remember --target profile "I prefer tea to coffee"
  reverie remember --correct fact:12 "the appointment moved to Friday"
  reverie remember --retract fact:12 --reason "cancelled"
  reverie remember --restore fact:12

Relative dates are pinned at write time ("tomorrow (2026-03-04)"). Corrections and
retractions never delete: the old fact stays in history (memory/facts.jsonl)."""


class UsageError(Exception):
    """A command line that is well-formed but wrong; the message is the one line shown."""


def add_import_args(imp: argparse.ArgumentParser) -> None:
    imp.add_argument(
        "file", help='JSONL: {"session","id","ts","role","content","speaker"?} per line'
    )
    imp.add_argument(
        "--summarise",
        action="store_true",
        help="also summarise each imported session (calls the summariser model)",
    )
    imp.add_argument(
        "--no-embed", action="store_true", help="leave embedding to the daemon's background task"
    )
    imp.add_argument(
        "--json",
        action="store_true",
        help="print the counts as JSON (progress as JSON lines on stderr)",
    )
    imp.add_argument(
        "--no-progress", action="store_true", help="no progress bar, even on a terminal"
    )


def add_search_args(search: argparse.ArgumentParser) -> None:
    search.add_argument("query", nargs="?", help="what to search for")
    search.add_argument("--k", type=int, default=10, help="how many results (default 10)")
    search.add_argument(
        "--json", action="store_true", help="print a JSON array (one per line with --batch)"
    )
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument(
        "--batch",
        metavar="FILE",
        help="one query per line; one result array per line, in order",
    )
    search.add_argument(
        "--kind", action="append", choices=KINDS, help="only these kinds (repeatable)"
    )
    search.add_argument(
        "--include-retired", action="store_true", help="include superseded or retracted memories"
    )
    search.add_argument(
        "--raw",
        action="store_true",
        help="search the text as given (no decomposition, no time words)",
    )


def add_remember_args(remember: argparse.ArgumentParser) -> None:
    remember.add_argument(
        "text", nargs="?", metavar="TEXT", help="the fact (or the corrected text with --correct)"
    )
    remember.add_argument(
        "--target",
        choices=("memory", "profile"),
        default="memory",
        help="memory: the running log (default); profile: a stable fact about you",
    )
    remember.add_argument(
        "--tag", action="append", default=[], metavar="TAG", help="a keyword (repeatable)"
    )
    action = remember.add_mutually_exclusive_group()
    action.add_argument(
        "--correct", metavar="ID", help="supersede fact ID (e.g. fact:12) with TEXT"
    )
    action.add_argument("--retract", metavar="ID", help="withdraw fact ID; it stays in history")
    action.add_argument(
        "--restore",
        metavar="ID",
        help="undo the retraction of fact ID (e.g. one sleep retired as stale)",
    )
    remember.add_argument("--reason", default="", help="why a retracted fact no longer holds")
    remember.add_argument("--json", action="store_true", help="print the result as JSON")


def add_recall_args(recall: argparse.ArgumentParser) -> None:
    recall.add_argument("query", metavar="QUERY", help="a question or keywords")
    recall.add_argument(
        "--json", action="store_true", help="print the answer, planner outcome and sources as JSON"
    )


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
    if args.retract is None and restore is None and not text:
        raise UsageError("remember needs TEXT (or --retract ID)")
    if args.retract is not None and text:
        raise UsageError("--retract takes no TEXT; give the reason with --reason")
    if restore is not None and text:
        raise UsageError("--restore takes no TEXT")
    return {
        "text": text,
        "target": args.target,
        "tags": list(args.tag),
        "correct": args.correct,
        "retract": args.retract,
        "restore": restore,
        "reason": args.reason,
    }


def recall_query(args: argparse.Namespace) -> str:
    if not args.query.strip():
        raise UsageError("recall needs a non-empty QUERY")
    return str(args.query)
