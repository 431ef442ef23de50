"""`reverie memory import | search | reindex | stats` — retrieval from the command line.

These commands open the home's database directly (WAL: safe while the daemon runs) and
never call a model, except `import --summarise`, which asks the memory system to summarise
the imported sessions. Output for machines is JSON (`--json`), one array per query with
`--batch`; logs go to stderr so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from daemon.cli_support import CommandError, Env, resolve_env
from daemon.clock import SystemClock
from daemon.log import configure
from daemon.memory.api import MemoryItem
from daemon.memory.embedders import Embedder, EmbedderError, NoEmbedder, build_embedder
from daemon.memory.importer import import_file, reindex_transcripts
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose
from daemon.memory.transcripts import TranscriptError
from daemon.store.db import Database

KINDS = ("fact", "profile", "summary", "chunk", "journal")
BATCH_PRIME = 256


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    memory = subparsers.add_parser("memory", parents=[common], help="import, search and rebuild the memory index")
    sub = memory.add_subparsers(dest="memory_command", metavar="SUBCOMMAND")
    memory.set_defaults(func=lambda args: _usage(memory))

    imp = sub.add_parser("import", parents=[common], help="import transcripts (JSONL); no LLM call unless --summarise")
    imp.add_argument("file", type=Path, help='JSONL: {"session","id","ts","role","content","speaker"?} per line')
    imp.add_argument("--summarise", action="store_true", help="also summarise each imported session (calls the summariser model)")
    imp.add_argument("--no-embed", action="store_true", help="leave embedding to the daemon's background task")
    imp.add_argument("--json", action="store_true", help="print the counts as JSON")
    imp.set_defaults(func=_import)

    search = sub.add_parser("search", parents=[common], help="raw retrieval, no LLM: ranked memories with sources")
    search.add_argument("query", nargs="?", help="what to search for")
    search.add_argument("--k", type=int, default=10, help="how many results (default 10)")
    search.add_argument("--json", action="store_true", help="print a JSON array (one per line with --batch)")
    search.add_argument("--mode", choices=("hybrid", "lexical", "vector"), default="hybrid")
    search.add_argument("--batch", type=Path, metavar="FILE", help="one query per line; one result array per line, in order")
    search.add_argument("--kind", action="append", choices=KINDS, help="only these kinds (repeatable)")
    search.add_argument("--include-retired", action="store_true", help="include superseded or retracted memories")
    search.add_argument("--raw", action="store_true", help="search the text as given (no decomposition, no time words)")
    search.set_defaults(func=_search)

    reindex = sub.add_parser("reindex", parents=[common], help="rebuild the memory index from the files")
    reindex.set_defaults(func=_reindex)

    stats = sub.add_parser("stats", parents=[common], help="what the memory index holds")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(func=_stats)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _quiet_logs(env: Env) -> None:
    level = env.settings.log.level if env.settings.log.level in ("debug", "warning", "error") else "warning"
    configure(level=level, fmt="console", to="stderr")


def _embedder(env: Env, mode: str = "hybrid") -> Embedder:
    if mode == "lexical":
        return NoEmbedder()
    try:
        return build_embedder(env.settings.memory)
    except EmbedderError as exc:
        raise CommandError(str(exc)) from None


@asynccontextmanager
async def open_index(env: Env, *, mode: str = "hybrid", background: bool = False) -> AsyncIterator[MemoryIndex]:
    """Open the home's database and a memory index over it (no background task by default)."""
    try:
        db = await Database.open(env.home.db_file, busy_timeout_ms=env.settings.store.busy_timeout_ms)
    except Exception as exc:
        raise CommandError(f"cannot open the index database {env.home.db_file}: {exc}") from None
    async with db:
        embedder = _embedder(env, mode)
        index = MemoryIndex(db, embedder, env.settings.memory, SystemClock(), background=background)
        async with index:
            yield index
        aclose = getattr(embedder, "aclose", None)
        if aclose is not None:
            await aclose()


def item_json(item: MemoryItem) -> dict[str, Any]:
    """Render one result in the `memory search --json` contract."""
    return {
        "kind": item.kind,
        "id": item.id,
        "score": round(item.score, 6),
        "text": item.text,
        "session": item.session,
        "message_ids": list(item.message_ids),
        "ts": item.ts.isoformat() if item.ts else None,
        "title": item.title,
        "origin": item.origin,
        "source": item.source,
        "tags": list(item.tags),
    }


async def _import(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    _quiet_logs(env)
    if not args.file.is_file():
        raise CommandError(f"no such file: {args.file}")
    started = time.perf_counter()
    async with open_index(env) as index:
        try:
            result = await import_file(args.file, home=env.home, index=index)
        except TranscriptError as exc:
            raise CommandError(f"import stopped, nothing written: {exc}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{args.file} is not UTF-8 text") from None
        embedded = "deferred"
        if not args.no_embed and index.embedder.dim > 0:
            try:
                await index.flush()
                embedded = index.embedder.name
            except EmbedderError as exc:
                embedded = f"failed ({exc}); the daemon will retry"
        elif index.embedder.dim == 0:
            embedded = "none (lexical only)"
    summaries = 0
    if args.summarise and result.session_ids:
        summaries = await _summarise(env, result.session_ids)
    elapsed = time.perf_counter() - started
    counts = {
        "sessions": result.sessions, "messages": result.messages, "already_present": result.already_present,
        "chunks": result.chunks, "summaries": summaries, "embeddings": embedded, "seconds": round(elapsed, 2),
    }
    if args.json:
        print(json.dumps(counts))
    else:
        print(
            f"imported {result.messages} messages in {result.sessions} sessions "
            f"({result.already_present} already present), {result.chunks} new chunks, "
            f"{summaries} summaries; embeddings: {embedded}; {elapsed:.1f}s"
        )
    return 0


async def _summarise(env: Env, session_ids: tuple[str, ...]) -> int:
    from daemon.memory.system import MemorySystem
    from daemon.models.ledger import UsageLedger
    from daemon.models.roles import ModelRoles

    async with await Database.open(env.home.db_file) as db, ModelRoles(env.settings, UsageLedger(db, env.settings.spend)) as roles:
        system = MemorySystem(home=env.home, db=db, settings=env.settings, roles=roles, bus=None, clock=SystemClock(), background=False)
        async with system:
            done = 0
            for sid in session_ids:
                if await system.summarise_session(sid, wait=True) is not None:
                    done += 1
            return done


async def _search(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    _quiet_logs(env)
    if args.k <= 0:
        raise CommandError("--k must be a positive number")
    if (args.query is None) == (args.batch is None):
        raise CommandError("give either a QUERY or --batch FILE")
    if args.batch is not None:
        try:
            queries = args.batch.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CommandError(f"cannot read {args.batch}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise CommandError(f"{args.batch} is not UTF-8 text") from None
    else:
        queries = [args.query]
    clock = SystemClock()
    async with open_index(env, mode=args.mode) as index:
        await index.refresh()
        for start in range(0, len(queries), BATCH_PRIME):
            part = queries[start : start + BATCH_PRIME]
            plans = [decompose(q, now=clock.now()) for q in part]
            if args.mode != "lexical" and index.embedder.dim > 0:
                # One embedding batch for all the sub-queries of this slice.
                await index.query_vectors([q for p in plans for q in (p.all_queries() if not args.raw else [p.text]) if q])
            for query, plan in zip(part, plans, strict=True):
                if not query.strip():
                    results: list[MemoryItem] = []
                elif args.raw:
                    results = await index.search(query, k=args.k, kinds=args.kind, mode=args.mode, include_retired=args.include_retired)
                else:
                    results = await index.search_plan(plan, k=args.k, mode=args.mode, kinds=args.kind, include_retired=args.include_retired)
                _print_results(results, args, query)
    return 0


def _print_results(results: list[MemoryItem], args: argparse.Namespace, query: str) -> None:
    if args.json:
        print(json.dumps([item_json(r) for r in results], ensure_ascii=False), flush=args.batch is not None)
        return
    if args.batch is not None:
        print(f"# {query}")
    if not results:
        print("(no memories match)")
    for rank, item in enumerate(results, 1):
        when = item.ts.date().isoformat() if item.ts else "?"
        text = " ".join(item.text.split())
        print(f"{rank:>2}. [{item.kind} {item.score:.4f}] {when} {item.id}")
        print(f"    {text[:300]}{'…' if len(text) > 300 else ''}")
        if item.message_ids:
            print(f"    messages: {', '.join(item.message_ids[:8])}{' …' if len(item.message_ids) > 8 else ''}")


async def _reindex(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    _quiet_logs(env)
    started = time.perf_counter()
    try:
        from daemon.memory.system import MemorySystem
    except ImportError:
        MemorySystem = None  # type: ignore[assignment,misc]
    if MemorySystem is not None:
        from daemon.models.ledger import UsageLedger
        from daemon.models.roles import ModelRoles

        async with await Database.open(env.home.db_file) as db, ModelRoles(env.settings, UsageLedger(db, env.settings.spend)) as roles:
            system = MemorySystem(home=env.home, db=db, settings=env.settings, roles=roles, bus=None, clock=SystemClock())
            async with system:
                counts = await system.reindex()
                from daemon.journal.heartbeat import reindex_journal

                counts["journal"] = await reindex_journal(env.home, env.settings, system.index)
                await system.index.flush()
    else:
        async with open_index(env) as index:
            await index.clear()
            counts = await reindex_transcripts(env.home, index)
            await index.flush()
    shown = ", ".join(f"{k}={v}" for k, v in counts.items())
    print(f"reindexed from {env.home.root}: {shown}; {time.perf_counter() - started:.1f}s")
    return 0


async def _stats(args: argparse.Namespace) -> int:
    env = resolve_env(args)
    _quiet_logs(env)
    async with open_index(env) as index:
        stats = await index.stats()
    if args.json:
        print(json.dumps(stats))
    else:
        for key, value in stats.items():
            print(f"{key}: {value}")
    return 0
