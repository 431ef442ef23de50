"""Cost of the sleep maintenance and dreams phases over 30 and 365 days of history.

    nice -n 10 .venv/bin/python -m bench.sleep_phases_bench --days 30 365 --nights 5

For each history length: a real home and SQLite database with one conversation a day (six
messages, summarised by the offline model) and a fact remembered every third day (some of
them dated plans), on a `FakeClock`. Then, with the clock on the last day:

- `first maintenance`: the first night ever, folding the whole backlog into monthly summaries;
- `nightly maintenance`: the median of `--nights` further nights, each after one more day;
- `nightly dreams`: the same nights' dreams phase with the offline (instant) model — model
  calls, input and output tokens from the usage ledger, wall time.

Prints one line per measurement and the 365/30 ratio of each median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon.clock import FakeClock
from daemon.log import configure
from daemon.memory.embedders import HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.offline import OfflineModel
from daemon.paths import Home
from daemon.services import Services, open_services
from daemon.settings import SchedulerSettings, Settings
from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.phases import PhaseContext
from daemon.store.db import Database

START = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
SUBJECTS = [
    (
        "sourdough",
        "We decided to feed the starter twice a day with rye flour and proof the dough cold.",
    ),
    (
        "budget",
        "We agreed to move 400 euros a month into the index fund and keep three months of expenses.",
    ),
    (
        "garden",
        "I will plant tomatoes and basil along the south fence and mulch the beds in spring.",
    ),
    (
        "scraper",
        "We decided to add a retry with backoff around every request and log each timeout.",
    ),
    ("novel", "We agreed chapter three needs a slower opening scene and one less point of view."),
    ("trip", "We decided to book the night train to Vienna and keep the first day free."),
    ("running", "I will run three times a week and keep one long slow run on Sundays."),
]


async def add_day(system: MemorySystem, db: Database, clock: FakeClock, day: int) -> None:
    subject, decision = SUBJECTS[day % len(SUBJECTS)]
    sid = f"d{day:04d}-{subject}"
    started = START + timedelta(days=day, hours=1)
    clock.set(started)
    await db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, 'trunk', ?, ?)",
        (sid, f"/bench/{sid}.jsonl", started.isoformat()),
    )
    messages = [
        ("user", f"Let's pick up the {subject} again (day {day})."),
        ("assistant", f"Sure. Last time we covered the {subject} basics."),
        ("user", f"What should I change about the {subject}?"),
        ("assistant", decision),
        ("user", "Sounds good, thanks."),
        ("assistant", "Anytime."),
    ]
    for i, (role, content) in enumerate(messages):
        await db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, f"{sid}-m{i}", i, (started + timedelta(minutes=i)).isoformat(), role, content),
        )
    await system.index_session(sid)
    await system.summarise_session(sid, wait=True)
    if day % 3 == 0:
        text = (
            f"the {subject} follow-up is next friday"
            if day % 2
            else f"my {subject} notes live in notebook {day}"
        )
        await system.remember(text)


def context(services: Services, since: datetime | None, cycle: str) -> PhaseContext:
    """What the daemon's sleep cycle gives a phase."""
    return PhaseContext(
        cycle_id=cycle, reason="nightly", session_id="trunk", started_at=services.clock.now(),
        since=since, home=services.home, settings=services.settings, db=services.db,
        models=services.roles, bus=services.bus, clock=services.clock, memory=services.memory,
    )  # fmt: skip


async def usage(db: Database) -> tuple[int, int, int]:
    row = await db.fetchone(
        "SELECT count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM usage_ledger WHERE role = 'dreams'"
    )
    return int(row[0]), int(row[1]), int(row[2])


async def one_history(days: int, nights: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="reverie-sleep-bench-")) / "home"
    home = Home(root)
    home.ensure()
    settings = Settings(scheduler=SchedulerSettings(timezone="UTC"))
    clock = FakeClock(START)
    offline = OfflineModel()
    # The daemon's own services, not serving: the bench runs the two phases itself.
    async with open_services(
        home,
        settings,
        clock,
        models={"summariser": offline, "dreams": offline},
        embedder=HashEmbedder(),
        watch_files=False,
    ) as services:
        system, db = services.memory, services.db
        built = time.perf_counter()
        for day in range(days):
            await add_day(system, db, clock, day)
        build_s = time.perf_counter() - built
        clock.set(START + timedelta(days=days))
        t0 = time.perf_counter()
        first = await MaintenancePhase().run(context(services, None, "first"))
        first_s = time.perf_counter() - t0
        maint, dream, calls, tokens_in, tokens_out = [], [], [], [], []
        last_sleep = clock.now()
        for night in range(nights):
            await add_day(system, db, clock, days + night)
            clock.set(START + timedelta(days=days + night + 1))
            ctx = context(services, last_sleep, f"night-{night}")
            t0 = time.perf_counter()
            await MaintenancePhase().run(ctx)
            maint.append(time.perf_counter() - t0)
            before = await usage(db)
            t0 = time.perf_counter()
            await DreamsPhase().run(ctx)
            dream.append(time.perf_counter() - t0)
            after = await usage(db)
            calls.append(after[0] - before[0])
            tokens_in.append(after[1] - before[1])
            tokens_out.append(after[2] - before[2])
            last_sleep = clock.now()
        stats = await system.index.stats()
    return {
        "days": days, "build_s": build_s, "first_s": first_s, "first_changed": first.changed,
        "maint_ms": statistics.median(maint) * 1000, "dream_ms": statistics.median(dream) * 1000,
        "calls": statistics.median(calls), "tokens_in": statistics.median(tokens_in),
        "tokens_out": statistics.median(tokens_out), "memories": stats["memories"], "db_bytes": stats["db_bytes"],
    }  # fmt: skip


async def bench(days_list: list[int], nights: int) -> None:
    results = [await one_history(days, nights) for days in days_list]
    for r in results:
        print(
            f"{r['days']:>4} days: {r['memories']} memories, db {r['db_bytes'] / 1e6:.1f} MB (built in {r['build_s']:.1f}s)\n"
            f"      first maintenance {r['first_s'] * 1000:.0f} ms — {r['first_changed']}\n"
            f"      nightly maintenance median {r['maint_ms']:.1f} ms\n"
            f"      nightly dreams median {r['dream_ms']:.1f} ms, {r['calls']:.0f} model call(s), "
            f"{r['tokens_in']:.0f} input / {r['tokens_out']:.0f} output tokens"
        )
    if len(results) >= 2:
        a, b = results[0], results[-1]
        print(
            f"ratio {b['days']}/{a['days']} days: first maintenance ×{b['first_s'] / a['first_s']:.1f}, "
            f"nightly maintenance ×{b['maint_ms'] / a['maint_ms']:.1f}, nightly dreams ×{b['dream_ms'] / a['dream_ms']:.1f}, "
            f"dream input tokens ×{b['tokens_in'] / max(1, a['tokens_in']):.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, nargs="+", default=[30, 365])
    parser.add_argument("--nights", type=int, default=5)
    args = parser.parse_args()
    configure("warning", "console", to="stderr")
    import anyio

    anyio.run(bench, args.days, args.nights)


if __name__ == "__main__":
    main()
