"""Journal benchmark: the cost of one entry as the day grows.

    python -m bench.journal_bench                      # days of 10, 100 and 200 entries
    python -m bench.journal_bench --sizes 10,100,200 --reps 15

For each size the day is first filled with that many entries (written by the journal itself,
through the same path as a heartbeat), then one more turn of conversation is journaled
`--reps` times (each rep on a fresh copy of the full day). Per entry it reports:

- wall time of `JournalHeartbeat.record` with an *instant* scripted heartbeat model (so the
  journal's own work: reading the transcript since the cursor, redaction, the request, the
  fsynced append, the digest rebuilt from the whole day and written atomically, the cursor,
  and the index row), median and p95;
- the model's input and output tokens for the entry (its token budget is
  `journal.entry_input_tokens` in, the role's `max_tokens` out);
- the size of the day's digest and of the journal layer the context carries (after the
  layer's `journal_entries` newest sections and its cap), in tokens.
"""

from __future__ import annotations

import argparse
import json
import shutil
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

from daemon.journal.digest import digest_body, latest_digest, newest_sections  # noqa: E402
from daemon.models.base import ModelRequest, Usage  # noqa: E402
from daemon.testing import Reply, ScriptedModel  # noqa: E402
from daemon.tokens import count_tokens  # noqa: E402
from tests.journal_support import MIDNIGHT, journal_rig, journal_settings  # noqa: E402

_SECOND = timedelta(seconds=1)

TURN_USER = "Let's move the kiln firing to Thursday at 10 and update notes/kiln.md; is the cone 6 glaze ready?"
TURN_REPLY = (
    "I updated notes/kiln.md: firing moved to Thursday 10:00. The cone 6 glaze is mixed and sieved."
)


def instant_model() -> ScriptedModel:
    """Answers at once with a typical entry; usage counted with the real tokenizer."""
    answer = json.dumps(
        {
            "summary": "Moved the kiln firing to Thursday 10:00 and updated notes/kiln.md; the cone 6 glaze is ready.",
            "decisions": ["Fire on Thursdays at 10:00"],
            "progress": ["notes/kiln.md updated", "cone 6 glaze mixed and sieved"],
            "open_questions": [],
            "files_touched": ["notes/kiln.md"],
            "tags": ["kiln", "glaze"],
        }
    )

    def script(request: ModelRequest) -> Reply:
        shown = "\n".join([*(b.text for b in request.system), *(m.text for m in request.messages)])
        return Reply(
            text=answer,
            usage=Usage(input_tokens=count_tokens(shown), output_tokens=count_tokens(answer)),
        )

    return ScriptedModel(script)


async def _fill(root: Path, n: int) -> None:
    cfg = journal_settings(max_entries_per_day=100_000)
    async with journal_rig(root, config=cfg, model=instant_model()) as rig:
        for i in range(n):
            rig.clock.set(MIDNIGHT + (i + 1) * (86_000 / (n + 2)) * _SECOND)
            await rig.say(f"Entry {i}: {TURN_USER}", TURN_REPLY)
            await rig.journal.record("trunk-1", "heartbeat")


async def _one(root: Path, n: int) -> dict[str, Any]:
    cfg = journal_settings(max_entries_per_day=100_000)
    model = instant_model()
    async with journal_rig(root, config=cfg, model=model, start=MIDNIGHT + 86_100 * _SECOND) as rig:
        await rig.say(TURN_USER, TURN_REPLY)
        started = time.perf_counter()
        entry = await rig.journal.record("trunk-1", "heartbeat")
        elapsed = (time.perf_counter() - started) * 1000
        assert entry is not None and len(rig.lines()) == n + 1, (entry, len(rig.lines()))
        _day, text = latest_digest(rig.home) or (None, "")
        layer = newest_sections(digest_body(text), cfg.context.journal_entries)
        return {
            "ms": elapsed,
            "input_tokens": entry.token_usage["input"],
            "output_tokens": entry.token_usage["output"],
            "digest_tokens": count_tokens(text),
            "layer_tokens": min(count_tokens(layer), cfg.context.layers["journal"].cap),
        }


def measure(n: int, reps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        anyio.run(_fill, base, n)
        runs: list[dict[str, Any]] = []
        for r in range(reps):
            copy = Path(tmp) / f"rep{r}"
            shutil.copytree(base, copy)
            runs.append(anyio.run(_one, copy, n))
            shutil.rmtree(copy)
    ms = sorted(x["ms"] for x in runs)
    return {
        "entries_in_day": n,
        "reps": reps,
        "entry_ms_median": round(statistics.median(ms), 2),
        "entry_ms_p95": round(ms[max(0, int(len(ms) * 0.95) - 1)], 2),
        "input_tokens": runs[0]["input_tokens"],
        "output_tokens": runs[0]["output_tokens"],
        "digest_tokens": runs[0]["digest_tokens"],
        "journal_layer_tokens": runs[0]["layer_tokens"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,200", help="entries already in the day")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    rows = [measure(int(n), args.reps) for n in args.sizes.split(",")]
    first = rows[0]["entry_ms_median"]
    for row in rows:
        row["ratio_to_first"] = round(row["entry_ms_median"] / first, 2) if first else None
    print(
        f"{'entries':>8} {'median ms':>10} {'p95 ms':>8} {'ratio':>6} {'in tok':>7} {'out tok':>8} {'digest tok':>11} {'layer tok':>10}"
    )
    for row in rows:
        print(
            f"{row['entries_in_day']:>8} {row['entry_ms_median']:>10} {row['entry_ms_p95']:>8} {row['ratio_to_first']:>6} "
            f"{row['input_tokens']:>7} {row['output_tokens']:>8} {row['digest_tokens']:>11} {row['journal_layer_tokens']:>10}"
        )
    results = REPO / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "journal.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
