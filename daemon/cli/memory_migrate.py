"""`reverie memory migrate --to postgresql://…`: move a home's store to a PostgreSQL server.

The daemon must be stopped (the home's lock is held for the copy). The copy is checked
before it is called done (daemon.store.migrate): row counts per table, and a sample of
memories found by their own words on the server as they were in the SQLite file. The
SQLite file is left as it was; once the check passes, set `[storage] url` to the server.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from typing import Any

from daemon.app import HomeLock, HomeLocked
from daemon.cli.memory_direct import _embedder, _quiet_logs
from daemon.cli.support import CommandError, Env, print_err, resolve_env
from daemon.clock import SystemClock
from daemon.memory.index import MemoryIndex
from daemon.settings import server_url_problem
from daemon.store.db import Database
from daemon.store.migrate import (
    compare_counts,
    copy_store,
    found_by_own_words,
    sample_queries,
)
from daemon.store.postgres import StorageUnavailable


async def migrate(args: argparse.Namespace) -> int:
    env = resolve_env(args, create=False)
    _quiet_logs(env)
    url = str(args.to)
    if problem := server_url_problem(url):
        raise CommandError(f"--to: {problem}", code=2)
    if not env.home.db_file.exists():
        raise CommandError(f"no SQLite store to move: {env.home.db_file} does not exist")
    namespace = args.namespace or env.settings.storage.namespace or env.settings.agent.name
    started = time.perf_counter()
    try:
        with HomeLock(env.home.lock_file):
            report = await _migrate(env, url, namespace)
    except HomeLocked as exc:
        raise CommandError(f"{exc}: stop the daemon before moving its store") from None
    except StorageUnavailable as exc:
        raise CommandError(str(exc)) from None
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print(json.dumps(report))
    else:
        for table, (before, after) in report["counts"].items():
            mark = "" if before == after else "   <- differs"
            print(f"{table}: {before} -> {after}{mark}")
        print(
            f"search check: {report['found_after']}/{report['searched']} sampled memories found "
            f"by their own words on the server ({report['found_before']} in the SQLite file)"
        )
        if report["ok"]:
            print(
                f"moved to {report['where']} in {report['seconds']}s; now set [storage] url "
                f'= "{url}" in {env.home.root / "reverie.toml"}'
                + (f' (and namespace = "{namespace}")' if args.namespace else "")
            )
        else:
            print_err("the copy does not match the SQLite store; [storage] url left unset")
    return 0 if report["ok"] else 1


async def _migrate(env: Env, url: str, namespace: str) -> dict[str, Any]:
    home, settings = env.home, env.settings
    # The source is migrated to the latest schema first, so both sides have the same tables.
    async with (
        await Database.open(home.db_file) as src,
        await Database.open(home.db_file, url=url, namespace=namespace) as dst,
    ):
        copied = await copy_store(src, dst)
        counts = await compare_counts(src, dst)
        queries = await sample_queries(src)
        found: dict[str, set[str]] = {}
        for name, db in (("before", src), ("after", dst)):
            index = MemoryIndex(
                db, _embedder(env), settings.memory, SystemClock(), background=False, persist=False
            )
            async with index:
                found[name] = await found_by_own_words(partial(index.search, k=5), queries)
        missing = sorted(found["before"] - found["after"])
        ok = all(a == b for a, b in counts.values()) and not missing
        return {
            "ok": ok,
            "where": dst.describe,
            "copied": copied,
            "counts": {t: list(c) for t, c in counts.items()},
            "searched": len(queries),
            "found_before": len(found["before"]),
            "found_after": len(found["after"]),
            "missing": missing,
        }
