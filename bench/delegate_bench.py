"""Delegate forks: spawn overhead, and the trunk context saved by delegating tool-heavy work.

    nice -n 10 python -m bench.delegate_bench [--spawns 40] [--pages 8] [--page-chars 2000]

Everything is real but the model (an instant scripted one) and the survey tool: the daemon's
own services (`open_services`) — the database file, the context assembler (persona, memory
layers), the trunk's and the forks' tools, the fork's transcript and lineage row.

* **Spawn overhead**: the wall time of one `delegate` call whose fork answers at once with
  `task_complete` — the `before_fork` gate, the lineage row, the fork's session and
  transcript (fsynced), its context assembly, one model step, the task_complete call, the
  fork's shutdown (summary queued, transcript indexed). Median and p95 over `--spawns`.
* **Context saved**: a task that reads `--pages` pages of `--page-chars` characters with a
  tool, then answers in a short paragraph. Inline, the trunk makes the calls itself and
  every page stays in its history; delegated, the trunk makes one `delegate` call and keeps
  only the fork's summary. Reported: the trunk's next request (system + tools + whole
  history, in tokens) after each, the difference, and what the fork spent instead.
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
from daemon.tools.registry import Tool, ToolContext  # noqa: E402

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


def pages_read(request: ModelRequest) -> int:
    return sum(1 for m in request.messages for b in m.content if isinstance(b, ToolResultBlock))


class Script:
    """The trunk (inline or delegating) and the fork, as an instant scripted model."""

    def __init__(self, mode: str, pages: int) -> None:
        self.mode = mode
        self.pages = pages

    def __call__(self, request: ModelRequest) -> Reply | str:
        if self.mode == "spawn":
            if is_fork(request):
                return Reply(
                    tool_calls=(("task_complete", {"summary": "done", "outcome": "success"}),)
                )
            return "ok"
        read = pages_read(request)
        if is_fork(request) or self.mode == "inline":
            if read < self.pages:
                return Reply(tool_calls=(("read_page", {"n": read}),))
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
                            "task": "read the survey pages and report",
                            "context": f"{self.pages} pages",
                        },
                    ),
                )
            )
        return SUMMARY


async def run(mode: str, *, spawns: int, pages: int, page_chars: int) -> dict[str, Any]:
    from daemon.log import configure

    configure("warning")
    settings = Settings(
        memory=MemorySettings(embedder="none"), agent=AgentSettings(max_tool_steps=pages + 4)
    )
    clock = SystemClock()
    script = Script(mode, pages)
    model = ScriptedModel(script)
    offline = OfflineModel()
    models: dict[str, Model] = {
        "trunk": model,
        "delegate": model,
        "summariser": offline,
        "recall_planner": offline,
        "recall_synthesis": offline,
    }

    async def read_page(_ctx: ToolContext, args: dict[str, Any]) -> str:
        return page(int(args["n"]), page_chars)

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    survey = Tool(
        name="read_page",
        description="Read one survey page.",
        input_schema=schema,
        handler=read_page,
    )
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home")
        home.ensure()
        # The daemon's own services, not serving: the bench drives the trunk's loop itself.
        async with open_services(home, settings, clock, models=models, watch_files=False) as svc:
            # The survey tool is the bench's own: offered to the trunk (inline) and the forks.
            svc.tools.register(survey)
            svc.delegator.base_tools.register(survey)
            session = await Session.open(
                db=svc.db,
                directory=home.trunk_dir,
                session_id="trunk-bench",
                kind="trunk",
                now=clock.now(),
            )
            if mode == "spawn":
                ctx = ToolContext(session_id=session.id, turn_id="t-bench", call_id="toolu_bench")
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
            result = await svc.trunk.loop.run_turn(
                session,
                turn_id="t1",
                prompt="Survey the pages and tell me what they say.",
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
    spawn = await run("spawn", spawns=args.spawns, pages=0, page_chars=0)
    inline = await run("inline", spawns=0, pages=args.pages, page_chars=args.page_chars)
    delegated = await run("delegated", spawns=0, pages=args.pages, page_chars=args.page_chars)
    saved = inline["trunk_next_request_tokens"] - delegated["trunk_next_request_tokens"]
    return {
        "spawn_overhead": spawn,
        "context": {
            "pages": args.pages,
            "page_chars": args.page_chars,
            "inline": inline,
            "delegated": delegated,
            "trunk_tokens_saved": saved,
            "trunk_ratio_delegated_to_inline": round(
                delegated["trunk_next_request_tokens"] / inline["trunk_next_request_tokens"], 3
            ),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawns", type=int, default=40)
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--page-chars", type=int, default=2000)
    args = parser.parse_args()
    results = anyio.run(main_async, args)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "delegate_bench.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
