"""Idle cost with schedules stored: model calls, CPU, and the keeper's wake-ups.

    python -m bench.schedule_idle                       # 0 and 1,000 schedules, 60 s idle each
    python -m bench.schedule_idle --schedules 1000 --idle 300 --due 3

The real daemon runs against the fake Messages API (any model call would be counted there)
with N schedules stored — one-offs spread over the coming year and repeating rules whose
times are hours away — plus `--due` reminders that come due during the idle window, ten
seconds apart. Nobody connects. Measured over the window: CPU seconds of the daemon process,
model calls, the schedules timer's wake-ups (its `job finished` log lines) and the firings.
Expected: zero model calls, CPU ~0 whatever N, one wake-up per due reminder (plus the one at
start).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.process import cpu_seconds  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.harness import daemon_env  # noqa: E402

CONFIG = """
[scheduler]
timezone = "Europe/London"
"""
# The reminders due in the window start this long after the daemon is ready.
FIRST_DUE_S = 10.0


async def _store(home: Path, count: int, due_at: list[datetime]) -> None:
    from daemon.clock import SystemClock
    from daemon.paths import Home
    from daemon.schedule.store import ScheduleStore
    from daemon.settings import load_settings
    from daemon.store.db import Database

    settings = load_settings(home)
    from daemon.scheduler import local_zone

    zone = local_zone(settings.scheduler.timezone)
    async with await Database.open(Home(home).db_file) as db:
        store = ScheduleStore(db, clock=SystemClock(), zone=zone, settings=settings.schedule)
        now_local = datetime.now(zone)
        for i in range(count):
            if i % 2 == 0:
                when = (now_local + timedelta(days=1 + i % 365, minutes=i)).strftime(
                    "%Y-%m-%dT%H:%M"
                )
            else:
                # Repeating, at least two hours from now.
                hour = (now_local.hour + 2 + i % 20) % 24
                when = ["every day at", "every weekday at", "every monday at"][i % 3]
                when = f"{when} {hour:02d}:{i % 60:02d}"
            await store.add(when, f"stored schedule {i}", requested_by="agent")
        for k, due in enumerate(due_at):
            await store.add(due.isoformat(), f"due reminder {k}", requested_by="person")


def _rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def _timer_runs(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if obj.get("event") == "job finished" and obj.get("job") == "schedules":
            out.append(obj)
    return out


def run_once(count: int, idle_s: float, due: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(CONFIG)
        # Due during the window; the daemon takes ~1-2 s to start.
        base = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=FIRST_DUE_S + 3)
        due_at = [base + timedelta(seconds=10 * k) for k in range(due)]
        t0 = time.perf_counter()
        asyncio.run(_store(home, count, due_at))
        stored_s = time.perf_counter() - t0
        log = Path(tmp) / "daemon.log"
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "daemon.cli", "run", "--home", str(home)],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 60
                while '"daemon ready"' not in log.read_text(errors="replace"):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"the daemon did not start:\n{log.read_text()[-4000:]}")
                    time.sleep(0.05)
                time.sleep(1.0)  # start-up's own work (tokenizer warm-up) is not idle
                runs_before = len(_timer_runs(log))
                calls_before = len(fake.message_requests)
                cpu_before = cpu_seconds(proc.pid)
                time.sleep(idle_s)
                cpu = cpu_seconds(proc.pid) - cpu_before
                runs = _timer_runs(log)[runs_before:]
                calls = len(fake.message_requests) - calls_before
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        fired = _rows(home, "SELECT COUNT(*) FROM schedule_fires")[0][0]
        return {
            "schedules_stored": count + due,
            "store_s": round(stored_s, 2),
            "idle_s": idle_s,
            "cpu_seconds": round(cpu, 3),
            "cpu_percent": round(100 * cpu / idle_s, 3),
            "model_calls": calls,
            "timer_wakeups": len(runs),
            "due_in_window": due,
            "fired": fired,
            "timer_results": [r.get("result") for r in runs],
            "timer_ms": [r.get("duration_ms") for r in runs],
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, nargs="+", default=[0, 1000])
    ap.add_argument("--idle", type=float, default=60.0, help="seconds idle per run")
    ap.add_argument("--due", type=int, default=3, help="reminders due during the window")
    args = ap.parse_args()
    if args.due and FIRST_DUE_S + 3 + 10 * (args.due - 1) >= args.idle:
        raise SystemExit("--idle is too short for the due reminders to fall inside it")
    results = [run_once(n, args.idle, args.due) for n in args.schedules]
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "schedule_idle.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
