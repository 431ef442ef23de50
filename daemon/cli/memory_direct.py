"""`reverie memory import | search | reindex | stats`, `remember` and `recall` run over the home itself.

Parsed in `daemon.cli.memory`. When a daemon runs, `import`, `search`, `remember` and `recall`
are answered by it (`daemon.cli.forward`); these functions are the direct path, used when none
listens. They open the home's database
directly (WAL: safe while the daemon runs) and never call a model, except
`import --summarise`, which asks the memory system to summarise the imported sessions. Output for machines is JSON (`--json`), one array per query with
`--batch`; logs go to stderr so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import daemon.cli.memory_args as spec
import daemon.cli.memory_render as render
from daemon.cli.memory_render import ImportProgress
from daemon.cli.support import CommandError, Env, open_database, print_err, resolve_env
from daemon.clock import SystemClock
from daemon.commands import BATCH_QUERIES, ops
from daemon.commands.types import RememberRequest
from daemon.log import configure
from daemon.memory.embedders import Embedder, EmbedderError, NoEmbedder, build_embedder
from daemon.memory.index import MemoryIndex
from daemon.memory.transcripts import TranscriptError

if TYPE_CHECKING:
    from daemon.memory.system import MemorySystem

__all__ = ["import_", "open_index", "recall", "reindex", "remember", "search", "stats"]


def _quiet_logs(env: Env) -> None:
    level = (
        env.settings.log.level
        if env.settings.log.level in ("debug", "warning", "error")
        else "warning"
    )
    configure(level=level, fmt="console", to="stderr")


def _embedder(env: Env, mode: str = "hybrid") -> Embedder:
    if mode == "lexical":
        return NoEmbedder()
    try:
        return build_embedder(env.settings.memory)
    except EmbedderError as exc:
        raise CommandError(str(exc)) from None


@asynccontextmanager
async def open_index(
    env: Env, *, mode: str = "hybrid", background: bool = False
) -> AsyncIterator[MemoryIndex]:
    """Open the home's database and a memory index over it (no background task by default)."""
    async with await open_database(env) as db:
        embedder = _embedder(env, mode)
        index = MemoryIndex(db, embedder, env.settings.memory, SystemClock(), background=background)
        async with index:
            yield index
        aclose = getattr(embedder, "aclose", None)
        if aclose is not None:
            await aclose()


async def import_(args: argparse.Namespace) -> int:
    try:
        path = spec.import_file(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    _quiet_logs(env)
    summarise = None
    if args.summarise:

        async def summarise(ids: tuple[str, ...]) -> int:
            return await _summarise(env, ids, progress)

    progress = ImportProgress(as_json=args.json, enabled=not args.no_progress)
    try:
        async with open_index(env) as index:
            try:
                counts = await ops.import_transcripts(
                    path,
                    home=env.home,
                    index=index,
                    embed=not args.no_embed,
                    progress=progress,
                    summarise=summarise,
                )
            except TranscriptError as exc:
                raise CommandError(f"import stopped, nothing written: {exc}") from None
            except UnicodeDecodeError:
                raise CommandError(f"{args.file} is not UTF-8 text") from None
    finally:
        progress.close()
    render.import_counts(counts, as_json=args.json, out=sys.stdout)
    return 0


@asynccontextmanager
async def open_memory(env: Env, *, models: bool) -> AsyncIterator[MemorySystem]:
    """The home's memory system for one command: no background work, no event bus.

    Model roles (and the spend ledger) only with `models`: `memory reindex` builds none, so
    it cannot call a model.
    """
    from daemon.memory.system import MemorySystem
    from daemon.models.ledger import UsageLedger
    from daemon.models.roles import ModelRoles

    clock = SystemClock()
    async with await open_database(env) as db, AsyncExitStack() as stack:
        roles = (
            await stack.enter_async_context(
                ModelRoles(env.settings, UsageLedger(db, env.settings.spend, clock))
            )
            if models
            else None
        )
        system = MemorySystem(
            home=env.home,
            db=db,
            settings=env.settings,
            roles=roles,
            bus=None,
            clock=clock,
            background=False,
        )
        async with system:
            yield system


async def _summarise(env: Env, session_ids: tuple[str, ...], progress: ops.Progress) -> int:
    async with open_memory(env, models=True) as system:
        return await ops.summarise_sessions(system, session_ids, progress)


async def search(args: argparse.Namespace) -> int:
    try:
        queries = spec.search_queries(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    _quiet_logs(env)
    options = spec.search_options(args)
    clock = SystemClock()
    async with open_index(env, mode=args.mode) as index:
        for start in range(0, len(queries), BATCH_QUERIES):
            part = queries[start : start + BATCH_QUERIES]
            results = await ops.search_batch(index, part, now=clock.now(), **options)
            for query, items in zip(part, results, strict=True):
                render.search_results(
                    items,
                    as_json=args.json,
                    batch=args.batch is not None,
                    query=query,
                    out=sys.stdout,
                )
    return 0


async def reindex(args: argparse.Namespace) -> int:
    """Rebuild the index from the files with no model: no roles, no summariser, no background work."""
    from daemon.delegate.lineage import ForkLineage
    from daemon.journal.indexing import reindex_journal

    env = resolve_env(args)
    _quiet_logs(env)
    started = time.perf_counter()
    async with open_memory(env, models=False) as system:
        counts = await system.reindex()
        counts["journal"] = await reindex_journal(env.home, env.settings, system.index)
        counts["forks"] = await ForkLineage(system.db).rebuild(env.home.forks_dir)
        try:
            await system.index.flush()
        except EmbedderError as exc:
            counts["embed_failed"] = 1
            print_err(f"embedding failed ({exc}); the daemon will embed in the background")
    shown = ", ".join(f"{k}={v}" for k, v in counts.items())
    print(f"reindexed from {env.home.root}: {shown}; {time.perf_counter() - started:.1f}s")
    return 0


async def stats(args: argparse.Namespace) -> int:
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


async def remember(args: argparse.Namespace) -> int:
    """Store, correct, retract, restore or pin a fact (facts written here have origin `person`)."""
    from daemon.memory.facts import FactError

    try:
        request = spec.remember_request(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    async with open_memory(env, models=True) as memory:
        try:
            out = await ops.remember(memory, RememberRequest.from_args(request))
        except (FactError, ValueError) as exc:  # a refused fact; a shared one that no longer holds
            raise CommandError(str(exc)) from None
        await memory.index.flush()
    render.remember_result(out, as_json=args.json, out=sys.stdout)
    return 0


async def recall(args: argparse.Namespace) -> int:
    """Answer from memory the way the recall tool answers the agent."""
    from daemon.memory.transcript_windows import RecallError

    try:
        query = spec.recall_query(args)
    except spec.UsageError as exc:
        raise CommandError(str(exc)) from None
    env = resolve_env(args)
    async with open_memory(env, models=True) as memory:
        try:
            data = await ops.recall(memory, query)
        except RecallError as exc:
            raise CommandError(str(exc)) from None
    render.recall_answer(data, as_json=args.json, out=sys.stdout)
    return 0
