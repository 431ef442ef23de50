"""Lifecycle benchmarks: how long a session switch holds the trunk, and what it costs to fit the
working memory into the window as the session grows.

    python -m bench.lifecycle_bench                 # switch latency through the real daemon + fitting cost
    python -m bench.lifecycle_bench --switches 20 --turns 40

*Switch latency* is measured through the real daemon (offline model) as a `switch` command's
round trip over the socket after `--turns` turns of conversation: the hold (no turn was running),
the `session_before_switch` gate (the summariser is queued, not awaited), opening the new
session and recording the link. *Fitting* runs `fit_request` (what every model step does) over
histories of 10 to 5,000 turns against a 200k window, median per call.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.agent.budget import RequestBudget, RequestSizer, fit_request  # noqa: E402
from daemon.models.base import Message  # noqa: E402
from daemon.tokens import TokenCounter  # noqa: E402
from tests.harness import Client, DaemonProcess, daemon_env  # noqa: E402


def switch_latency(switches: int, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        d = DaemonProcess(home=Path(tmp) / "home", env=daemon_env({"REVERIE_LOG_LEVEL": "warning"}))
        d.start()
        try:
            times: list[float] = []
            held: list[float] = []
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                for s in range(switches):
                    for t in range(turns):
                        c.chat(f"turn {t} of session {s}: the garden needs watering on day {t}")
                    t0 = time.perf_counter()
                    result = c.command("switch", {"reason": "bench"})
                    times.append((time.perf_counter() - t0) * 1000)
                    assert result["type"] == "result", result
                    held.append(result["data"]["held_s"] * 1000)
        finally:
            d.stop()
    return {
        "switches": switches,
        "turns_before_each": turns,
        "round_trip_ms_median": round(statistics.median(times), 2),
        "round_trip_ms_p95": round(sorted(times)[max(0, int(len(times) * 0.95) - 1)], 2),
        "held_ms_median": round(statistics.median(held), 2),
    }


def fitting_cost() -> list[dict[str, Any]]:
    counter = TokenCounter()
    sizer = RequestSizer(counter)
    budget = RequestBudget(window=200_000, reserve_output=4096)
    rows = []
    for n in (10, 100, 1000, 5000):
        turns = [
            [
                Message.user(f"question {i}: how is the garden doing this week, and the shed?"),
                Message.assistant(f"answer {i}: " + "fine words " * 40),
            ]
            for i in range(n)
        ]
        current = [Message.user("and now?")]
        fit_request(
            turns=turns, current=current, fixed_tokens=5000, budget=budget, sizer=sizer
        )  # warm the counts
        samples = []
        for _ in range(20):
            t0 = time.perf_counter()
            fitted = fit_request(
                turns=turns, current=current, fixed_tokens=5000, budget=budget, sizer=sizer
            )
            samples.append((time.perf_counter() - t0) * 1000)
        rows.append(
            {
                "history_turns": n,
                "kept_turns": fitted.history_turns,
                "request_tokens": fitted.tokens,
                "fit_ms_median": round(statistics.median(samples), 3),
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--switches", type=int, default=10)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    out = {"switch": switch_latency(args.switches, args.turns), "fitting": fitting_cost()}
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "lifecycle.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
