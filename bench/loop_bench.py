"""The agent loop's own overhead per tool step, with an instant scripted model.

    python -m bench.loop_bench [--steps 20] [--turns 30]

Each turn makes `steps` tool calls (a no-op tool) and then answers. The time per step is
everything the loop does around the model and the tool: request building, streaming,
the durable transcript writes (fsync), the database index rows, the tool registry.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from daemon.agent.loop import AgentLoop  # noqa: E402
from daemon.agent.session import Session  # noqa: E402
from daemon.bus import EventBus  # noqa: E402
from daemon.clock import SystemClock  # noqa: E402
from daemon.models.base import ModelRequest, ToolResultBlock  # noqa: E402
from daemon.models.ledger import UsageLedger  # noqa: E402
from daemon.models.roles import ModelRoles  # noqa: E402
from daemon.settings import load_settings  # noqa: E402
from daemon.store.db import Database  # noqa: E402
from daemon.testing import Reply, ScriptedModel, static_context  # noqa: E402
from daemon.tokens import TokenCounter  # noqa: E402
from daemon.tools.registry import Tool, ToolContext, ToolRegistry  # noqa: E402


async def _noop(_ctx: ToolContext, args: dict[str, object]) -> str:
    return f"ok {args.get('n')}"


async def measure(steps: int, turns: int) -> dict[str, float]:
    from daemon.log import configure

    configure("warning")

    def script(request: ModelRequest) -> Reply:
        done = sum(
            1 for m in request.messages[-1:] for b in m.content if isinstance(b, ToolResultBlock)
        )
        calls_so_far = sum(
            1
            for m in request.messages
            if m.role == "user" and any(isinstance(b, ToolResultBlock) for b in m.content)
        )
        if calls_so_far < steps:
            return Reply(tool_calls=(("noop", {"n": calls_so_far + done}),))
        return Reply(text="finished")

    settings = load_settings(None)
    per_step: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with await Database.open(Path(tmp) / "bench.db") as db:
            ledger = UsageLedger(db, settings.spend)
            async with ModelRoles(
                settings, ledger, overrides={"trunk": ScriptedModel(script=script)}
            ) as roles:
                tools = ToolRegistry()
                tools.register(
                    Tool(
                        name="noop",
                        description="does nothing",
                        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
                        handler=_noop,
                    )
                )
                bus = EventBus()
                static_context(bus)
                loop = AgentLoop(
                    roles=roles,
                    tools=tools,
                    bus=bus,
                    clock=SystemClock(),
                    counter=TokenCounter(),
                    max_tool_steps=steps + 1,
                )
                for t in range(turns):
                    session = await Session.open(
                        db=db,
                        directory=Path(tmp),
                        session_id=f"bench-{t}",
                        kind="trunk",
                        now=SystemClock().now(),
                    )
                    t0 = time.perf_counter()
                    result = await loop.run_turn(
                        session,
                        turn_id=f"turn-{t}",
                        prompt="go",
                        observer=lambda e: None,
                        ts=SystemClock().now().isoformat(),
                    )
                    elapsed = time.perf_counter() - t0
                    assert result.tool_calls == steps, result
                    per_step.append(elapsed / (steps + 1))
    return {
        "steps_per_turn": steps,
        "turns": turns,
        "per_step_ms_median": round(1000 * statistics.median(per_step), 3),
        "per_step_ms_p95": round(1000 * sorted(per_step)[int(0.95 * (len(per_step) - 1))], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--turns", type=int, default=30)
    args = ap.parse_args()
    result = anyio.run(measure, args.steps, args.turns)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "loop.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
