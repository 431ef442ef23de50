"""The recall planner's index as history grows: its tokens and the time to build it.

    python -m bench.planner_index_bench                    # 30, 365 and 1,000 simulated days
    python -m bench.planner_index_bench --days 30,400 --queries 5

Each day is one short session (a subject from a pool, a detail of the day, a decision),
recorded as the trunk records it, chunked, and summarised by the real summariser with the
offline model, so every summary goes through the real writer and index. Every 30 simulated
days, and at the end, the real sleep maintenance folds what is older than
`sleep.fold_after_days` (30, the default) into months, on an injected clock. Then, for a few
questions, the planner's first index is built by the real recall code (`Recall.planner_lines`:
the same lines the planner model would be sent, with no model call) and measured in tokens,
lines and milliseconds. The check: at 1,000 days no more than 2x the tokens at 30 days, with
nothing cut by `memory.planner_index_tokens`.
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

from daemon.log import configure  # noqa: E402
from daemon.settings import SchedulerSettings, Settings, SleepSettings  # noqa: E402
from daemon.sleep.maintenance import fold_months  # noqa: E402
from daemon.tokens import count_tokens  # noqa: E402
from tests.sleep_phase_support import START, SleepRig, sleep_home  # noqa: E402

SUBJECTS = [
    ("sourdough", "We decided to feed the sourdough starter twice a day with rye flour."),
    ("budget", "We agreed the monthly budget puts {n}0 euros into the index fund."),
    ("garden", "I will plant tomatoes and basil along the south fence, bed {n}."),
    ("bicycle", "We decided to replace the bicycle chain and the rear cassette."),
    ("novel", "We agreed chapter {n} of the novel needs a slower opening scene."),
    ("scraper", "I decided to migrate the scraper from requests to httpx with {n} retries."),
    ("choir", "The choir moved rehearsals to room {n} on Tuesday evenings."),
    ("boiler", "The boiler service is booked; the engineer comes at {n} o'clock."),
    ("trip", "We kept the Kotor trip under {n}00 euros and booked the ferry early."),
    ("allotment", "The allotment plot {n} gets the new water butt this week."),
    ("running", "I ran {n} kilometres along the river and the knee held up."),
]
PEOPLE = ["Ada", "Tomas", "Ines", "Rui", "Marta", "Joana", "Pedro", "Helena"]
QUESTIONS = [
    "what did we decide about the sourdough starter?",
    "which chapter of the novel needed a slower opening?",
    "how much did the Kotor trip cost?",
    "when does the choir rehearse?",
    "what did Helena say about the boiler?",
]
FOLD_EVERY = 30


def bench_settings() -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"), sleep=SleepSettings())


def day_session(day: int) -> tuple[str, list[tuple[str, str]]]:
    """The session id and messages of simulated day `day` (deterministic)."""
    subject, decision = SUBJECTS[day % len(SUBJECTS)]
    who = PEOPLE[(day // len(SUBJECTS)) % len(PEOPLE)]
    sid = f"d{day:04d}-{subject}"
    return sid, [
        ("user", f"{who} and I talked about the {subject} again today (day {day})."),
        ("assistant", decision.format(n=day % 9 + 2)),
    ]


async def build_history(rig: SleepRig, days: int) -> None:
    """`days` days of sessions, summarised as they end, folded by sleep maintenance as it goes."""
    for day in range(days):
        started = START + timedelta(days=day, hours=19)
        sid, messages = day_session(day)
        await rig.add_session(sid, messages, started=started)
        if (day + 1) % FOLD_EVERY == 0:
            rig.clock.set(started + timedelta(hours=8))
            await fold_months(rig.context())
    rig.clock.set(START + timedelta(days=days, hours=3))
    await fold_months(rig.context())


async def measure(rig: SleepRig, queries: list[str]) -> dict[str, Any]:
    """The planner's first index for each question: tokens, lines, entries cut, build time."""
    recaller = rig.memory.recaller
    tokens: list[int] = []
    lines_n: list[int] = []
    left: list[int] = []
    millis: list[float] = []
    for query in queries:
        t0 = time.perf_counter()
        lines, cut = await recaller.planner_lines(query)
        millis.append((time.perf_counter() - t0) * 1000)
        tokens.append(sum(count_tokens(line) + 1 for line in lines))
        lines_n.append(len(lines))
        left.append(cut)
    kinds = await rig.db.fetchall("SELECT kind, COUNT(*) FROM memories GROUP BY kind")
    return {
        "index_tokens_max": max(tokens),
        "index_tokens_median": statistics.median(tokens),
        "lines_max": max(lines_n),
        "entries_cut_max": max(left),
        "build_ms_median": round(statistics.median(millis), 1),
        "build_ms_max": round(max(millis), 1),
        "memories": {k: n for k, n in kinds},
    }


async def run_days(days: int, queries: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="reverie-planner-") as tmp:
        async with sleep_home(Path(tmp) / "home", settings=bench_settings()) as rig:
            t0 = time.perf_counter()
            await build_history(rig, days)
            built = time.perf_counter() - t0
            out = await measure(rig, queries)
    return {"days": days, "history_build_s": round(built, 1), **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--days", default="30,365,1000")
    ap.add_argument("--queries", type=int, default=len(QUESTIONS))
    args = ap.parse_args()
    configure(level="warning")
    queries = QUESTIONS[: max(1, args.queries)]
    results = []
    for days in [int(d) for d in args.days.split(",")]:
        result = anyio.run(run_days, days, queries)
        results.append(result)
        print(json.dumps(result), flush=True)
    base = results[0]["index_tokens_max"]
    print(
        f"\n| days | index tokens (max over {len(queries)} questions) | × first | lines | cut | build ms (median / max) | summaries | months |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['days']:,} | {r['index_tokens_max']:,} | {r['index_tokens_max'] / base:.2f} | "
            f"{r['lines_max']} | {r['entries_cut_max']} | {r['build_ms_median']} / {r['build_ms_max']} | "
            f"{r['memories'].get('summary', 0)} | {r['memories'].get('month', 0)} |"
        )
    out = REPO / "bench" / "results" / "planner_index.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
