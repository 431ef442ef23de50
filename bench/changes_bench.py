"""Facts that change, on real dialogue: night by night, what supersedes what, for reading by eye.

    python -m bench.changes_bench                        # ../shared/data/locomo-tune.json
    python -m bench.changes_bench --data FILE --json

The precision check of the mining phase's change handling (the rules' same key with another
value, and the slot check of `daemon.memory.slots`): each session of each conversation in FILE
(the LoCoMo format, as `bench.mining_bench` reads it) is recorded as one trunk session of user
lines, a day apart on an injected clock, and a night (the real mining phase, offline) follows
each. Printed: every supersession (the old fact's text → the new one's, whether the new value
was clear), and the counts. Public dialogue between two people, both recorded as the person:
most sentences are small talk, so what is superseded here is what a change check gets wrong as
much as right — read it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.mining_bench import DEFAULT_DATA, sessions  # noqa: E402
from daemon.log import configure  # noqa: E402
from daemon.sleep.mine import MiningPhase  # noqa: E402
from tests.sleep_phase_support import START, sleep_home  # noqa: E402


async def nights(data: list[dict[str, Any]]) -> dict[str, Any]:
    talks = sessions(data)
    changes: list[dict[str, Any]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        async with sleep_home(Path(tmp) / "home") as rig:
            for day, (sid, texts) in enumerate(talks):
                when = START + timedelta(days=day)
                await rig.add_session(
                    sid, [("user", t) for t in texts], started=when, summarise=False
                )
                rig.clock.set(when + timedelta(hours=12))
                report = await MiningPhase().run(rig.context(cycle_id=f"night-{day}"))
                for outcome in report.details["mined"]["outcomes"]:
                    if outcome["status"] != "superseded":
                        continue
                    new = rig.memory.facts.get(outcome["id"])
                    old = rig.memory.facts.get(outcome["old_id"])
                    if new is None or old is None:
                        continue
                    changes.append(
                        {
                            "session": sid,
                            "old": old.text,
                            "new": new.text,
                            "value": new.value,
                            "uncertain": "uncertain" in new.tags,
                        }
                    )
            facts = len([f for f in rig.memory.facts.facts(include_retired=True) if f.mined])
    return {
        "sessions": len(talks),
        "nights": len(talks),
        "mined_facts": facts,
        "superseded": len(changes),
        "uncertain": sum(1 for c in changes if c["uncertain"]),
        "wall_s": round(time.perf_counter() - started, 1),
        "changes": changes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"no data at {args.data}: pass --data FILE (the LoCoMo format)", file=sys.stderr)
        return 2
    configure(level="warning")
    out = anyio.run(nights, json.loads(args.data.read_text()))
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    for change in out["changes"]:
        mark = "?" if change["uncertain"] else "→"
        print(f"[{change['session']}] {change['old']}\n    {mark} {change['new']}")
    print({k: v for k, v in out.items() if k != "changes"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
