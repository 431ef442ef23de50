"""`reverie exam [--json] [--all]`: the last continuity self-exam, its misses and the trend.

It opens the home's database directly (read-only; WAL: safe while the daemon runs). The exam
itself is taken by the sleep cycle after every wake (`daemon.sleep.exam`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.support import has_store, has_table, open_database, resolve_env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from daemon.sleep.exam_record import Exam


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "exam",
        parents=[common],
        help="the last continuity self-exam: score, misses, the trend over nights",
        description=(
            "After every sleep the agent asks itself what it should know and answers from the "
            "context its first turn gets; this shows the last exam and the trend."
        ),
    )
    p.add_argument("--json", action="store_true", help="print the exam and the trend as JSON")
    p.add_argument("--all", action="store_true", help="list every question, not only the misses")
    p.set_defaults(func=run_exam)


def as_json(exams: list[Exam]) -> dict[str, Any]:
    from daemon.sleep.exam_record import trend_json

    summary = trend_json(exams)
    if summary is None:
        return {"score": None, "previous": None, "trend": [], "items": [], "misses": []}
    return {**exams[0].to_json(), **summary}


def as_text(exams: list[Exam], *, every: bool) -> str:
    from daemon.sleep.exam_record import miss_line, trend_json

    if not exams:
        return "(no self-exam yet: one is taken after each sleep; `reverie sleep --wait` runs one now)\n"
    last = exams[0]
    summary = trend_json(exams)
    assert summary is not None
    was = f" (was {summary['previous']:g})" if summary["previous"] is not None else ""
    lines = [
        f"self-exam after {last.cycle_id} ({last.taken_at:%Y-%m-%d %H:%M}): "
        f"{last.score:g}{was} · {last.hits}/{len(last.items)} found · "
        f"questions worded by {last.worded_by}",
        f"trend (last {len(summary['trend'])}): {summary['spark']}  "
        + " ".join(f"{s:g}" for s in summary["trend"]),
    ]
    misses = last.misses
    if misses:
        lines += ["", "missed:"]
        lines += [
            f"  {i.result:<6} {i.stratum:<7} {miss_line(i)}\n         asked: {i.question}"
            for i in misses
        ]
    elif last.items:
        lines += ["", "missed: nothing"]
    if every:
        hits = [i for i in last.items if i.result == "hit"]
        if hits:
            lines += ["", "found:"]
            lines += [
                f'  hit    {i.stratum:<7} {i.about} → "{i.answer}" (in {i.found_in})\n'
                f"         asked: {i.question}"
                for i in hits
            ]
    return "\n".join(lines) + "\n"


async def run_exam(args: argparse.Namespace) -> int:
    from daemon.sleep.exam_record import TREND, recent_exams

    env = resolve_env(args)
    exams: list[Exam] = []
    if has_store(env):
        async with await open_database(env, write=False) as db:
            if env.settings.storage.url or await has_table(db, "self_exams"):
                exams = await recent_exams(db, limit=TREND)
    if args.json:
        print(json.dumps(as_json(exams), ensure_ascii=False, indent=2))
    else:
        print(as_text(exams, every=args.all), end="")
    return 0
