"""Server time of the console's Memory page and of a memory search on it, at 100k memories.

    nice -n 10 .venv/bin/python -m bench.web_console                    # 100k memories, hash vectors
    nice -n 10 .venv/bin/python -m bench.web_console --embedder minilm    # queries encoded by MiniLM

The home is filled the way `bench.cli_latency` fills one (the real importer over a synthetic
dialogue, stand-in vectors of the embedder's size; each query is encoded by the real model),
plus told facts through the memory's own
`remember`. The daemon's services are then built over it (`open_services`, as `reverie run`
builds them) and the console's ASGI app (`build_app`) is asked, in-process and logged in:
`GET /memory` (the facts, kinds, summaries and months) and `GET /memory?q=…` (the page with a
hybrid search). Each figure is one request's time from the client's send to the last body
byte — the server's whole work for a page, no network. Writes JSON to `bench/results/`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from bench.cli_latency import QUERIES, RESULTS, StandIn, build_home, embedder_names
from daemon.clock import SystemClock
from daemon.memory.embedders import build_embedder
from daemon.paths import Home
from daemon.services import open_services
from daemon.settings import Settings
from daemon.web.app import build_app
from daemon.web.auth import ConsoleAuth

HOST = "bench.console"
TOKEN = "bench-token"


def summary(times_ms: list[float]) -> dict[str, float]:
    ordered = sorted(times_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(ordered[-1], 1),
        "n": len(ordered),
    }


async def timed(client: httpx.AsyncClient, path: str, **params: str) -> float:
    started = time.perf_counter()
    response = await client.get(path, params=params)
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{path} answered {response.status_code}: {response.text[:300]}")
    return elapsed


async def measure(root: Path, size: int, embedder: str, facts: int, rounds: int) -> dict[str, Any]:
    home = Home(root)
    # A home kept from an earlier run (--workdir) is measured again as it is.
    reused = home.db_file.exists()
    built = {"reused": True} if reused else await build_home(root, size, [embedder])
    name, dim = embedder_names(embedder)
    settings = Settings()
    # The home's vectors are stand-ins of the right size; a query is embedded by the real model.
    queries = (
        StandIn(name, dim)
        if embedder == "hash"
        else build_embedder(settings.memory.model_copy(update={"embedder": embedder}))
    )
    out: dict[str, Any] = {"size": size, "embedder": embedder, **built}
    async with open_services(
        home, settings, SystemClock(), embedder=queries, watch_files=False
    ) as services:
        t = time.perf_counter()
        for i in range(0 if reused else facts):
            await services.memory.remember(
                f"fact number {i}: the {QUERIES[i % len(QUERIES)]} note {i * 7919 % 10007}",
                origin="person",
            )
        await services.memory.index.flush()
        row = await services.db.fetchone("SELECT COUNT(*) FROM memories WHERE kind = 'fact'")
        out["facts"] = int(row[0])
        out["facts_s"] = round(time.perf_counter() - t, 1)
        app = build_app(services, ConsoleAuth(token=TOKEN, hosts=frozenset({HOST})))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=f"http://{HOST}"
        ) as client:
            login = await client.post("/login", data={"token": TOKEN})
            if login.status_code != 303:
                raise SystemExit(f"login failed: {login.status_code}")
            # One of each first: the index's first search loads what it keeps warm.
            out["first_page_ms"] = round(await timed(client, "/memory"), 1)
            out["first_search_ms"] = round(await timed(client, "/memory", q=QUERIES[0]), 1)
            page = [await timed(client, "/memory") for _ in range(rounds * 5)]
            search = [await timed(client, "/memory", q=q) for _ in range(rounds) for q in QUERIES]
        out["memory_page"] = summary(page)
        out["memory_search"] = summary(search)
        row = await services.db.fetchone("SELECT COUNT(*) FROM memories")
        out["memories"] = int(row[0])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=100_000, help="memories in the home (default 100k)")
    p.add_argument("--embedder", default="hash", help="hash, minilm or local (vectors' size)")
    p.add_argument("--facts", type=int, default=300, help="told facts added (default 300)")
    p.add_argument("--rounds", type=int, default=3, help="rounds over the 15 queries (default 3)")
    p.add_argument(
        "--workdir",
        type=Path,
        help="keep the home here (default: a temporary one); a home already there is reused",
    )
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="web-console-") as tmp:
        root = (args.workdir or Path(tmp)) / f"home-{args.size}"
        result = anyio.run(measure, root, args.size, args.embedder, args.facts, args.rounds)
    result["load_average"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"web_console_{args.size}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2), file=sys.stderr)
    for key in ("memory_page", "memory_search"):
        r = result[key]
        print(f"{key:<14} p50 {r['p50_ms']:>7.1f} ms  p95 {r['p95_ms']:>7.1f} ms  (n={r['n']})")


if __name__ == "__main__":
    main()
