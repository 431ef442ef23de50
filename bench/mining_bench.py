"""One night's fact mining, offline: the extractive rules and the store over real dialogue.

    python -m bench.mining_bench                              # ../shared/data/locomo-tune.json
    python -m bench.mining_bench --data FILE --json

Each session of each conversation in FILE (the LoCoMo format: `conversation.session_N` lists
of turns) is recorded as one trunk session of user lines on an injected clock, a day apart,
into a real home (`open_services`: the database, the index, the facts log). Then the real
mining phase runs once with the offline model, as a night would, and again with nothing new
(the cursor). Printed: messages read, facts by outcome (stored, superseded, confirmed, left
out as near duplicates), the phase's wall time, and the rules alone in µs per line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.log import configure  # noqa: E402
from daemon.memory.mining import Line, mine_lines  # noqa: E402
from daemon.sleep.mine import MiningPhase  # noqa: E402
from tests.sleep_phase_support import START, sleep_home  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo-tune.json"


def sessions(data: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for ci, conv in enumerate(data):
        for key, turns in conv["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                out.append((f"c{ci}-{key}", [str(t.get("text", "")) for t in turns]))
    return out


async def night(data: list[dict[str, Any]]) -> dict[str, Any]:
    talks = sessions(data)
    with tempfile.TemporaryDirectory() as tmp:
        async with sleep_home(Path(tmp) / "home") as rig:
            for day, (sid, texts) in enumerate(talks):
                await rig.add_session(
                    sid,
                    [("user", text) for text in texts],
                    started=START + timedelta(days=day),
                    summarise=False,
                )
            rig.clock.set(START + timedelta(days=len(talks)))
            started = time.perf_counter()
            report = await MiningPhase().run(rig.context())
            wall = time.perf_counter() - started
            started = time.perf_counter()
            again = await MiningPhase().run(rig.context())
            idle = time.perf_counter() - started
    lines = [
        Line(session=sid, id=f"{sid}-{i}", ts=START, role="user", origin="person", text=text)
        for sid, texts in talks
        for i, text in enumerate(texts)
    ]
    started = time.perf_counter()
    mine_lines(lines, UTC)
    rules = time.perf_counter() - started
    mined = report.details["mined"]
    return {
        "sessions": len(talks),
        "messages": mined["read"],
        "outcomes": dict(Counter(o["status"] for o in mined["outcomes"])),
        "night_s": round(wall, 2),
        "idle_night_s": round(idle, 3),
        "idle_read": again.details["mined"]["read"],
        "rules_us_per_line": round(rules / max(1, len(lines)) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    configure(level="warning")
    result = anyio.run(night, json.loads(args.data.read_text()))
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
