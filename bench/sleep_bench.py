"""The cost of one sleep cycle as history grows: model calls, tokens and wall time, instant model.

    python -m bench.sleep_bench                     # 30 and 365 days of history, 3 measured nights each
    python -m bench.sleep_bench --days 30,90,365 --nights 5

The daemon core runs in-process (real store, memory, context assembler, trunk and cycle with
maintenance, dreams and wake-up) on a fake clock, with the offline model in every role — an
instant model, so wall time is the daemon's own work. History is built by talking: each day
three turns (a fact to remember, a fact in passing, a decision), the day's session summarised
and switched, with no sleep, so the first cycle meets the whole backlog (every month to fold).
Then each measured night is one more day of talk and one nightly cycle. Model calls and tokens
come from the usage ledger; wall time per phase from a timing wrapper around each phase.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.agent.trunk import Trunk  # noqa: E402
from daemon.clock import FakeClock  # noqa: E402
from daemon.log import configure  # noqa: E402
from daemon.settings import MemorySettings, SchedulerSettings, Settings, SleepSettings  # noqa: E402
from daemon.sleep.dreams import DreamsPhase  # noqa: E402
from daemon.sleep.maintenance import MaintenancePhase  # noqa: E402
from daemon.sleep.phases import Phase, PhaseContext, PhaseReport  # noqa: E402
from daemon.sleep.wake import WakeUp  # noqa: E402
from tests.sleep_support import START, Rig, rig  # noqa: E402

PEOPLE = ["Ada", "Tomas", "Ines", "Rui", "Marta", "Joana", "Pedro", "Helena"]
PLACES = ["Lisbon", "Porto", "Braga", "Tavira", "Faro", "Coimbra", "Evora", "Sintra"]
TOPICS = [
    "the trip budget",
    "the hotel booking",
    "our savings plan",
    "the sourdough recipe",
    "the garden",
]


class Timed:
    """A phase wrapped to measure its wall time."""

    def __init__(self, phase: Phase, times: dict[str, float]) -> None:
        self.phase = phase
        self.name = phase.name
        self.optional = phase.optional
        self.times = times

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        t0 = time.perf_counter()
        try:
            return await self.phase.run(ctx)
        finally:
            self.times[self.name] = (time.perf_counter() - t0) * 1000


def day_messages(day: int) -> list[str]:
    who, where, topic = (
        PEOPLE[day % len(PEOPLE)],
        PLACES[day % len(PLACES)],
        TOPICS[day % len(TOPICS)],
    )
    return [
        f"remember that {who}'s locker at the {where} office is number {100 + day}",
        f"Long day: {who} called from {where} about {topic}, and the car needs new tyres before week {day}.",
        f"We decided to revisit {topic} in {day % 5 + 2} days and keep the budget under {day % 9 + 1}00 euros.",
    ]


async def _ledger(r: Rig) -> tuple[int, int, int]:
    row = await r.db.fetchone(
        "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0) FROM usage_ledger"
    )
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


async def _talk(r: Rig, day: int) -> None:
    r.clock.set(START + timedelta(days=day))
    for text in day_messages(day):
        await r.say(text)


async def _cycle(r: Rig, times: dict[str, float]) -> dict[str, Any]:
    times.clear()
    calls0, in0, out0 = await _ledger(r)
    t0 = time.perf_counter()
    outcome = await r.cycle.run("nightly")
    wall = (time.perf_counter() - t0) * 1000
    calls1, in1, out1 = await _ledger(r)
    return {
        "wall_ms": round(wall, 1),
        "model_calls": calls1 - calls0,
        "input_tokens": in1 - in0,
        "output_tokens": out1 - out0,
        "phase_ms": {k: round(v, 1) for k, v in times.items()},
        "steps": {k: v["status"] for k, v in outcome.steps.items()},
        "changed": {k: v.get("changed", "") for k, v in outcome.steps.items()},
    }


async def measure(days: int, nights: int) -> dict[str, Any]:
    cfg = Settings(
        scheduler=SchedulerSettings(timezone="UTC"),
        sleep=SleepSettings(jitter_minutes=0),
        memory=MemorySettings(embedder="none"),
    )
    times: dict[str, float] = {}

    def phases(trunk: Trunk) -> list[Phase]:
        return [
            Timed(MaintenancePhase(), times),
            Timed(DreamsPhase(), times),
            Timed(WakeUp(trunk), times),
        ]

    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock(START)
        t0 = time.perf_counter()
        async with rig(Path(tmp) / "home", settings=cfg, clock=clock, phases=phases) as r:
            for day in range(days):
                await _talk(r, day)
                assert r.trunk.session is not None
                await r.memory.summarise_session(r.trunk.session.id, wait=True)
                clock.set(START + timedelta(days=day, hours=20))
                await r.trunk.switch("bench history")
            built_s = time.perf_counter() - t0
            stats = await r.memory.index.stats()
            clock.set(START + timedelta(days=days, hours=3, minutes=30))
            first = await _cycle(r, times)
            steady = []
            for night in range(nights):
                await _talk(r, days + night)
                clock.set(START + timedelta(days=days + night + 1, hours=3, minutes=30))
                steady.append(await _cycle(r, times))
    med = {
        key: statistics.median(n[key] for n in steady)
        for key in ("wall_ms", "model_calls", "input_tokens", "output_tokens")
    }
    phase_med = {
        name: round(statistics.median(n["phase_ms"].get(name, 0.0) for n in steady), 1)
        for name in steady[0]["phase_ms"]
    }
    return {
        "days": days,
        "history_built_s": round(built_s, 1),
        "index": stats,
        "first_cycle": first,
        "nightly": {"nights": nights, **med, "phase_ms": phase_med, "last": steady[-1]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", default="30,365", help="history sizes in days, comma-separated")
    parser.add_argument(
        "--nights", type=int, default=3, help="nightly cycles measured after each history"
    )
    args = parser.parse_args()
    configure(level="warning", fmt="console", stream=sys.stderr)
    results = [anyio.run(measure, int(d), args.nights) for d in args.days.split(",")]
    print(
        f"{'days':>5} {'first cycle ms':>15} {'calls':>6} {'in tok':>8} {'out tok':>8} | {'nightly ms':>11} {'calls':>6} {'in tok':>8} {'out tok':>8}  nightly per phase ms"
    )
    for res in results:
        f, n = res["first_cycle"], res["nightly"]
        per = ", ".join(f"{k} {v}" for k, v in n["phase_ms"].items())
        print(
            f"{res['days']:>5} {f['wall_ms']:>15} {f['model_calls']:>6} {f['input_tokens']:>8} {f['output_tokens']:>8} |"
            f" {n['wall_ms']:>11} {n['model_calls']:>6} {n['input_tokens']:>8} {n['output_tokens']:>8}  {per}"
        )
    if len(results) > 1:
        a, b = results[0], results[-1]
        ratio = b["days"] / a["days"]
        print(
            f"growth ×{ratio:g} history: nightly wall ×{b['nightly']['wall_ms'] / a['nightly']['wall_ms']:.2f},"
            f" nightly input tokens ×{b['nightly']['input_tokens'] / max(1, a['nightly']['input_tokens']):.2f},"
            f" first cycle wall ×{b['first_cycle']['wall_ms'] / a['first_cycle']['wall_ms']:.2f}"
        )
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sleep_bench.json").write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
