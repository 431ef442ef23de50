"""bench.years' life replayed in one process, scored as bench.years scores a checkpoint.

A quick look at what recall holds after years, without the daemon's 1,100 days of starts,
nights and catch-ups (`bench.years` takes about an hour): the seeded life's talk days are
recorded as the trunk records them (each person's message answered "Noted."), chunked,
summarised by the offline summariser and mined by the nightly rules (`MiningPhase`) on an
injected clock, into a real home with the configured embedder (MiniLM when installed). Then
the first turn's context is assembled by `reverie context --prompt Q --json`'s own code under
libfaketime at the checkpoint's morning, for "good morning" and every question due, and
scored by `bench.years.score` (held, per kind, superseded alone).

    nice -n 10 .venv/bin/python -m bench.years_replay                   # month 36, seed 11
    nice -n 10 .venv/bin/python -m bench.years_replay --month 12 --keep /tmp/replay

What it leaves out: the daemon's own replies, compaction of long days, dreams, the
self-exam, sleep's maintenance (folding months). Prints one JSON line and the facts not held.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.years import NEUTRAL, assemble_all, day_messages, faketime_lib, generate, score  # noqa: E402


async def build(home_dir: Path, seed: int, upto: int) -> None:
    """Record the life's talk days before day `upto` into the home at `home_dir`."""
    from daemon.clock import FakeClock
    from daemon.memory.embedders import build_embedder
    from daemon.models.offline import OfflineModel
    from daemon.paths import Home
    from daemon.services import open_services
    from daemon.settings import SchedulerSettings, Settings, SleepSettings
    from daemon.sleep.mine import MiningPhase
    from tests.sleep_phase_support import SleepRig

    life = generate(seed)
    start = datetime.combine(life.start, datetime.min.time(), tzinfo=UTC) + timedelta(hours=9)
    home = Home(home_dir)
    home.ensure()
    cfg = Settings(scheduler=SchedulerSettings(timezone="UTC"), sleep=SleepSettings())
    clock = FakeClock(start)
    offline = OfflineModel()
    async with open_services(
        home,
        cfg,
        clock,
        models={"summariser": offline, "dreams": offline},
        embedder=build_embedder(cfg.memory),
        watch_files=False,
    ) as s:
        rig = SleepRig(
            home=home, db=s.db, settings=cfg, clock=clock, roles=s.roles, memory=s.memory, bus=s.bus
        )
        rng = random.Random(seed)
        for day in (d for d in life.talk_days if d < upto):
            when = start + timedelta(days=day)
            clock.set(when + timedelta(hours=2))
            messages: list[tuple[str, str]] = []
            for event in day_messages(life, day, rng):
                messages += [("user", event.text), ("assistant", "Noted.")]
            await rig.add_session(f"d{day}", messages, started=when)
            await MiningPhase().run(rig.context(cycle_id=f"c{day}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--month", type=int, default=36)
    ap.add_argument("--keep", type=Path, help="build the home here (kept), or reuse it")
    a = ap.parse_args(argv)
    life = generate(a.seed)
    day = round(a.month * 30.44)
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        home = a.keep or Path(tmp) / "home"
        if not (home / "reverie.db").exists():
            anyio.run(build, home, a.seed, day)
        morning = life.start + timedelta(days=day)
        env = dict(
            os.environ,
            LD_PRELOAD=str(faketime_lib()),
            FAKETIME=f"@{morning.isoformat()} 09:00:00",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        )
        prompts = [NEUTRAL, *sorted({f.question for f in life.facts if f.due(day)})]
        result = score(life, day, assemble_all(home, prompts, env))
    print(
        json.dumps(
            {
                "month": a.month,
                "day": day,
                **{k: result[k] for k in ("held", "by_kind", "superseded_alone")},
            }
        )
    )
    for row in result["rows"]:
        if not row["held"] or row["superseded_alone"]:
            print(
                f"  {row['fact']}: {row['question']!r} / {row['expected']}",
                row["superseded_alone"] or "",
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
