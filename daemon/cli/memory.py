"""`reverie memory …`, `reverie remember` and `reverie recall`: their command lines.

Building these parsers imports only the standard library and the argument definitions
(`daemon.cli.memory_args`): when a daemon runs, these commands are forwarded to it
(`daemon.cli.forward`) before anything heavy loads. The direct path — the database, the
embedding model — is imported only when a command runs without a daemon.
"""

from __future__ import annotations

import argparse
import importlib

import daemon.cli.memory_args as spec

# `typing` costs ~2 ms of a forwarded command, which builds this parser: annotations only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _direct(module: str, name: str) -> Callable[[argparse.Namespace], Any]:
    """The command `name` of `module`, imported when it runs (not when the parser is built)."""

    def run(args: argparse.Namespace) -> Any:
        from daemon.memory.minilm import cap_blas_threads

        cap_blas_threads()  # first: numpy's thread pool spins until capped
        return getattr(importlib.import_module(module), name)(args)

    return run


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_facts_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--all", action="store_true", help="also the facts no longer current (changed, retracted)"
    )
    which.add_argument(
        "--history",
        metavar="ID",
        help="the values fact ID has had, oldest first (fact:12, or just 12)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON array of facts")


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    memory = subparsers.add_parser(
        "memory", parents=[common], help="import, search and rebuild the memory index"
    )
    sub = memory.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    memory.set_defaults(func=lambda args: _usage(memory))

    imp = sub.add_parser(
        "import",
        parents=[common],
        help="import transcripts (JSONL); no LLM call unless --summarise",
    )
    spec.add_arguments(imp, spec.IMPORT)
    imp.set_defaults(func=_direct("daemon.cli.memory_direct", "import_"))

    search = sub.add_parser(
        "search", parents=[common], help="raw retrieval, no LLM: ranked memories with sources"
    )
    spec.add_arguments(search, spec.SEARCH)
    search.set_defaults(func=_direct("daemon.cli.memory_direct", "search"))

    reindex = sub.add_parser(
        "reindex", parents=[common], help="rebuild the memory index from the files (no model call)"
    )
    reindex.set_defaults(func=_direct("daemon.cli.memory_direct", "reindex"))

    move = sub.add_parser(
        "migrate",
        parents=[common],
        help="copy the home's SQLite store to a PostgreSQL server and check the copy",
    )
    move.add_argument(
        "--to", required=True, metavar="URL", help="postgresql://user@host/db (no password)"
    )
    move.add_argument("--namespace", help="the agent's schema there (default: the [agent] name)")
    move.add_argument("--json", action="store_true", help="the report as one JSON object")
    move.set_defaults(func=_direct("daemon.cli.memory_migrate", "migrate"))

    stats = sub.add_parser("stats", parents=[common], help="what the memory index holds")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_direct("daemon.cli.memory_direct", "stats"))

    facts = sub.add_parser(
        "facts",
        parents=[common],
        help="the facts (told and mined), or how one has changed (--history ID)",
    )
    _add_facts_arguments(facts)
    facts.set_defaults(func=_direct("daemon.cli.memory_facts", "facts"))

    remember = subparsers.add_parser(
        "remember",
        parents=[common],
        help="store an explicit fact (or --correct / --retract one)",
        epilog=spec.REMEMBER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    spec.add_arguments(remember, spec.REMEMBER)
    remember.set_defaults(func=_direct("daemon.cli.memory_direct", "remember"))

    recall = subparsers.add_parser(
        "recall", parents=[common], help="answer from memory with citations (the recall tool)"
    )
    spec.add_arguments(recall, spec.RECALL)
    recall.set_defaults(func=_direct("daemon.cli.memory_direct", "recall"))
