"""Delegate forks: spawn overhead, the trunk context saved by delegating tool-heavy work, and
what a tool call costs beyond the tool's own work.

    nice -n 10 python -m bench.delegate_bench [--spawns 40] [--files 8 20] [--file-chars 2000]

Everything is real but the model (an instant scripted one): the daemon's own services
(`open_services`) — the database file, the context assembler (persona, memory layers), the
trunk's and the forks' tools with the permission guard, the real `read_file` over files in
the workspace, the fork's transcript and lineage row.

* **Spawn overhead**: the wall time of one `delegate` call whose fork answers at once with
  `task_complete` — the `before_fork` gate, the lineage row, the fork's session and
  transcript (fsynced), its context assembly, one model step, the task_complete call, the
  fork's shutdown (summary queued, transcript indexed). Median and p95 over `--spawns`.
* **Context saved**: a task that reads `--files` files of `--file-chars` characters with
  `read_file`, then answers in a short paragraph. Inline, the trunk makes the calls itself and
  every file stays in its history; delegated, the trunk makes one `delegate` call and keeps
  only the fork's summary. Reported: the trunk's next request (system + tools + whole
  history, in tokens) after each, the difference, and what the fork spent instead.
* **Tool-call overhead**: one `read_file` call through the trunk's registry (argument
  validation, the permission policy — an allowed read, no approval —, output cap, the
  untrusted-output label) against the same handler called alone; median and p95 of the
  difference over `--calls`.
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

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.agent.session import Session  # noqa: E402
from daemon.clock import SystemClock  # noqa: E402
from daemon.delegate.lineage import ForkLineage  # noqa: E402
from daemon.models.base import Model, ModelRequest, ToolResultBlock  # noqa: E402
from daemon.models.offline import OfflineModel  # noqa: E402
from daemon.paths import Home  # noqa: E402
from daemon.services import open_services  # noqa: E402
from daemon.settings import AgentSettings, MemorySettings, Settings  # noqa: E402
from daemon.testing import Reply, ScriptedModel  # noqa: E402
from daemon.tools.registry import ToolContext  # noqa: E402

WORDS = "tide heron quarry lantern copper meadow kiln orchard ledger harbour cedar falcon".split()
SUMMARY = (
    "Read every page: the survey finds 7 heron nests, 3 near the quarry; the kiln ledger balances."
)


def page(n: int, chars: int) -> str:
    words = [WORDS[(n * 7 + i * 3) % len(WORDS)] + str(i % 97) for i in range(chars // 8)]
    return f"Page {n}: " + " ".join(words)[:chars]


def is_fork(request: ModelRequest) -> bool:
    first = request.messages[0].text if request.messages else ""
    return first.startswith("You are in focused task mode.")


def files_read(request: ModelRequest) -> int:
    return sum(1 for m in request.messages for b in m.content if isinstance(b, ToolResultBlock))


class Script:
    """The trunk (inline or delegating) and the fork, as an instant scripted model."""

    def __init__(self, mode: str, files: int) -> None:
        self.mode = mode
        self.files = files

    def __call__(self, request: ModelRequest) -> Reply | str:
        if self.mode == "spawn":
            if is_fork(request):
                return Reply(
                    tool_calls=(("task_complete", {"summary": "done", "outcome": "success"}),)
                )
            return "ok"
        read = files_read(request)
        if is_fork(request) or self.mode == "inline":
            if read < self.files:
                return Reply(tool_calls=(("read_file", {"path": f"survey/page-{read}.txt"}),))
            if is_fork(request):
                return Reply(
                    tool_calls=(("task_complete", {"summary": SUMMARY, "outcome": "success"}),)
                )
            return SUMMARY
        if read == 0:
            return Reply(
                tool_calls=(
                    (
                        "delegate",
                        {
                            "task": "read the survey files and report",
                            "context": f"{self.files} files in survey/",
                        },
                    ),
                )
            )
        return SUMMARY


async def run(
    mode: str, *, spawns: int = 0, files: int = 0, file_chars: int = 0, calls: int = 0
) -> dict[str, Any]:
    from daemon.log import configure

    configure("warning")
    settings = Settings(
        memory=MemorySettings(embedder="none"), agent=AgentSettings(max_tool_steps=files + 4)
    )
    clock = SystemClock()
    script = Script(mode, files)
    model = ScriptedModel(script)
    offline = OfflineModel()
    models: dict[str, Model] = {
        "trunk": model,
        "delegate": model,
        "summariser": offline,
        "recall_planner": offline,
        "recall_synthesis": offline,
    }
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure()
        survey = home.workspace_dir / "survey"
        survey.mkdir()
        for n in range(max(files, 1)):
            (survey / f"page-{n}.txt").write_text(page(n, file_chars or 2000) + "\n")
        # The daemon's own services, not serving: the bench drives the trunk's loop itself.
        async with open_services(home, settings, clock, models=models, watch_files=False) as svc:
            session = await Session.open(
                db=svc.db,
                directory=home.trunk_dir,
                session_id="trunk-bench",
                kind="trunk",
                now=clock.now(),
            )
            ctx = ToolContext(session_id=session.id, turn_id="t-bench", call_id="toolu_bench")
            if mode == "spawn":
                times = []
                for _ in range(spawns):
                    started = time.perf_counter()
                    await svc.delegator.delegate(ctx, "answer at once", "nothing else")
                    times.append((time.perf_counter() - started) * 1000)
                times.sort()
                return {
                    "spawns": spawns,
                    "median_ms": round(statistics.median(times), 2),
                    "p95_ms": round(times[int(0.95 * (len(times) - 1))], 2),
                }
            if mode == "overhead":
                tool = svc.tools.get("read_file")
                assert tool is not None, "read_file is not in the trunk's tool set"
                args = {"path": "survey/page-0.txt"}
                through, alone = [], []
                for _ in range(calls):
                    started = time.perf_counter()
                    outcome = await svc.tools.call("read_file", args, ctx)
                    through.append((time.perf_counter() - started) * 1000)
                    assert not outcome.is_error, outcome.content
                    started = time.perf_counter()
                    await tool.handler(ctx, args)
                    alone.append((time.perf_counter() - started) * 1000)
                extra = sorted(t - a for t, a in zip(through, alone, strict=True))
                return {
                    "calls": calls,
                    "registry_median_ms": round(statistics.median(through), 3),
                    "handler_alone_median_ms": round(statistics.median(alone), 3),
                    "overhead_median_ms": round(statistics.median(extra), 3),
                    "overhead_p95_ms": round(extra[int(0.95 * (len(extra) - 1))], 3),
                }
            result = await svc.trunk.loop.run_turn(
                session,
                turn_id="t1",
                prompt="Read the survey files and tell me what they say.",
                observer=lambda _e: None,
                ts=clock.now().isoformat(),
            )
            rows = await ForkLineage(svc.db).all()
            return {
                "trunk_next_request_tokens": result.context_tokens,
                "trunk_steps": result.steps,
                "fork_tokens_spent": sum(r.tokens for r in rows),
                "forks": len(rows),
            }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    spawn = await run("spawn", spawns=args.spawns)
    overhead = await run("overhead", calls=args.calls, file_chars=args.file_chars)
    context = []
    for files in args.files:
        inline = await run("inline", files=files, file_chars=args.file_chars)
        delegated = await run("delegated", files=files, file_chars=args.file_chars)
        saved = inline["trunk_next_request_tokens"] - delegated["trunk_next_request_tokens"]
        context.append(
            {
                "files": files,
                "file_chars": args.file_chars,
                "inline": inline,
                "delegated": delegated,
                "trunk_tokens_saved": saved,
                "trunk_ratio_delegated_to_inline": round(
                    delegated["trunk_next_request_tokens"] / inline["trunk_next_request_tokens"], 3
                ),
            }
        )
    return {"spawn_overhead": spawn, "tool_call_overhead": overhead, "context": context}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=40)
    parser.add_argument("--files", type=int, nargs="+", default=[8, 20])
    parser.add_argument("--file-chars", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    results = anyio.run(main_async, args)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "delegate_bench.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
