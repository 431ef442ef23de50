"""`reverie context`: show exactly what the model would see for a prompt, and what it cost.

Runs outside the daemon: it reads the home's persona, topic and memory files and the memory
index (read-only, safe while the daemon runs) and assembles the context the way a turn does,
then prints each layer with its tokens, what was truncated and why, and how topics scored.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

from daemon.cli.support import CommandError, Env, resolve_env

# The command's definition imports nothing heavy (`reverie --help` loads every command's
# module); what it runs is imported when it runs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from daemon.context.assembler import AssembledContext
    from daemon.context.handover import HandoverDesk
    from daemon.memory.api import MemoryView
    from daemon.threads import ThreadBook


class _CurrentStderr:
    """Write to whatever `sys.stderr` is now (it may be swapped after configuration)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


def add_commands(subparsers: Any, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "context",
        parents=[common],
        help="the assembled context for a prompt, per layer, with token counts",
        description="Assemble the system prompt for PROMPT as a turn would, and explain it.",
    )
    p.add_argument(
        "--prompt", default="", metavar="TEXT", help="the message to assemble context for"
    )
    p.add_argument(
        "--previous-reply",
        default="",
        metavar="TEXT",
        help="the agent's previous reply (topics and recall read it too)",
    )
    p.add_argument("--json", action="store_true", help="print the breakdown and the blocks as JSON")
    p.add_argument("--text", action="store_true", help="also print the assembled system prompt")
    p.set_defaults(func=run_context)


async def _open_view(env: Env, stack: AsyncExitStack) -> tuple[MemoryView | None, str]:
    try:
        from daemon.memory.system import MemorySystem
    except ImportError:
        return None, "memory system not installed; memory layers left out"
    opener = getattr(MemorySystem, "open_view", None)
    if opener is None:
        return None, "memory system has no read-only view yet; memory layers left out"
    try:
        view = await stack.enter_async_context(opener(env.home, env.settings))
    except Exception as exc:
        return (
            None,
            f"memory index could not be opened ({type(exc).__name__}: {exc}); memory layers left out",
        )
    return view, ""


async def _open_threads(env: Env, stack: AsyncExitStack) -> ThreadBook | None:
    """The home's open threads, read-only (None when the home has no store yet)."""
    from daemon.clock import SystemClock, local_zone
    from daemon.store.db import Database
    from daemon.threads import ThreadBook

    settings = env.settings
    if not env.home.db_file.exists() and not settings.storage.url:
        return None
    readonly = not settings.storage.url
    try:
        db = await Database.open_configured(
            env.home.db_file, settings, readonly=readonly, migrate=not readonly
        )
    except Exception:
        return None  # the memory view's note already says the store cannot be opened
    stack.push_async_callback(db.close)
    return ThreadBook(
        db,
        clock=SystemClock(),
        zone=local_zone(settings.scheduler.timezone),
        expire_days=settings.threads.expire_days,
    )


async def _handover(
    env: Env, threads: ThreadBook | None, view: MemoryView | None
) -> HandoverDesk | None:
    """The model handover the trunk's next turn would carry (`reverie handover`), if any."""
    from daemon.clock import SystemClock
    from daemon.context.handover import HandoverDesk, configured_trunk

    if threads is None:
        return None
    desk = HandoverDesk(
        home=env.home,
        db=threads.db,
        settings=env.settings,
        clock=SystemClock(),
        current=configured_trunk(env.settings, dict(os.environ)),
        view=view,
        threads=threads,
    )
    try:
        desk.pending = await desk.peek()
    except Exception:
        return None  # a store from before the kv table cannot have one
    return desk


async def run_context(args: argparse.Namespace) -> int:
    """Assemble and print the context for `--prompt`."""
    from daemon.clock import SystemClock
    from daemon.context.assembler import ContextAssembler
    from daemon.log import configure
    from daemon.tokens import default_counter
    from daemon.topics.router import TopicRouter

    env = resolve_env(args)
    # Logs go to stderr so `--json` output stays parseable.
    level = env.settings.log.level if env.settings.log.level != "info" else "warning"
    configure(level=level, fmt="console", stream=_CurrentStderr())
    router = TopicRouter(env.home, env.settings.topics)
    async with AsyncExitStack() as stack:
        view, note = await _open_view(env, stack)
        threads = await _open_threads(env, stack)
        handover = await _handover(env, threads, view)
        assembler = ContextAssembler(
            home=env.home,
            settings=env.settings,
            view=view,
            router=router,
            counter=default_counter(),
            clock=SystemClock(),
            threads=threads,
            handover=handover,
        )
        try:
            result = await assembler.assemble(args.prompt, previous_reply=args.previous_reply)
        except OSError as exc:
            raise CommandError(f"cannot assemble context: {exc}") from None
    if note:
        result.report["notes"].insert(0, note)
    if args.json:
        print(json.dumps(as_json(result), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(as_table(result, prompt=args.prompt, settings_points=env.settings.topics))
        if args.text:
            print("\n" + "=" * 72 + "\n" + result.text)
    return 0


def _layer_names(result: AssembledContext) -> list[str]:
    return [row["name"] for row in result.report["layers"] if row["tokens"]]


def as_json(result: AssembledContext) -> dict[str, Any]:
    """The report plus the blocks, each named by its layer."""
    names = _layer_names(result)
    return {
        **result.report,
        "timings_ms": {k: round(v, 3) for k, v in result.timings.items()},
        "blocks": [
            {"layer": name, "cache_breakpoint": block.cache_breakpoint, "text": block.text}
            for name, block in zip(names, result.blocks, strict=True)
        ],
    }


def as_table(result: AssembledContext, *, prompt: str, settings_points: Any) -> str:
    """A human-readable breakdown: one row per layer, then cuts, topics and notes."""
    from daemon.context.assembler import LAYER_ORDER

    r = result.report
    shown = prompt if len(prompt) <= 60 else prompt[:57] + "…"
    lines = [
        f'Context for "{shown}": {r["total_tokens"]} of {r["budget"]} tokens ({r["counter"]}), '
        f"{result.timings.get('assemble_ms', 0.0):.1f} ms",
        "",
        f"{'layer':<14}{'tokens':>7}{'target':>8}{'cap':>7}  {'items':<7} part",
    ]
    rows = {row["name"]: row for row in r["layers"]}
    for name in LAYER_ORDER:
        row = rows[name]
        part = "stable" if row["stable"] else "volatile"
        if name in r["cache_breakpoints"]:
            part += "  ◀ cache breakpoint"
        items = f"{row['kept']}/{row['items']}"
        lines.append(
            f"{name:<14}{row['tokens']:>7}{row['target']:>8}{row['cap']:>7}  {items:<7} {part}"
        )
    lines.append(f"{'total':<14}{r['total_tokens']:>7}{'':>8}{r['budget']:>7}")
    reasons = [(row["name"], row.get("why", "")) for row in r["layers"] if row.get("why")]
    if reasons:
        lines += ["", "Why:"] + [f"  {name}: {why}" for name, why in reasons]
    if r["over_budget"]:
        lines += ["", f"! {r['over_budget']}"]
    cuts = [(row["name"], c) for row in r["layers"] for c in row["truncated"]]
    if cuts:
        lines += ["", "Truncated:"]
        for name, c in cuts:
            size = (
                f"{c['tokens_before']}→{c['tokens_after']} tokens"
                if c["action"] == "cut"
                else f"{c['tokens_before']} tokens"
            )
            lines.append(f"  {name}: {c['id']} {c['action']} ({size}): {c['reason']}")
    topics = r["topics"]
    point = settings_points.system_prompt
    lines += ["", f"Topics (system prompt: top {point.top_n}, min score {point.min_score:g}):"]
    if not topics["scores"]:
        lines.append("  none matched")
    for s in topics["scores"]:
        mark = "✓" if s["selected"] else " "
        matched = ", ".join(s["matched"]) or "—"
        lines.append(
            f"  {mark} {s['id']:<24} score {s['score']:>4g}  matched: {matched}  ({s['reason']})"
        )
    for problem in topics["problems"]:
        lines.append(f"  ! {problem}")
    if r["rejected_contributions"]:
        lines += ["", "Rejected contributions:"]
        lines += [
            f"  {c['layer']} ← {c['origin']} {c['source']}: {c['reason']}"
            for c in r["rejected_contributions"]
        ]
    if r["notes"]:
        lines += ["", "Notes:"] + [f"  - {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"
