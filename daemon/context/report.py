"""The turn's context report: what each layer cost, what was cut and why, what was left out.

What `reverie context`, the console's Context page and `status` read about a prompt; the
agent loop reads its `memory_origins` (whose word the turn has read).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from daemon.context.budget import LAYER_ORDER, STABLE_LAYERS, layer_limit
from daemon.context.layers import MEMORY_CLOSE, Fitted, Layer
from daemon.settings import Settings
from daemon.topics.router import TopicScore

# The layer each memory read feeds: what a turn goes without when the store cannot answer.
ASK_LAYERS = {
    "profile_facts": "profile",
    "recent_entries": "themes",
    "recent_summaries": "recollections",
    "recent_facts": "recollections",
    "auto_recall": "recall",
}


def layer_rows(
    settings: Settings, layers: dict[str, Layer], fitted: dict[str, Fitted], why: dict[str, str]
) -> list[dict[str, Any]]:
    """One row per layer, in prompt order: its tokens, limits, items kept and cuts, and why."""
    rows: list[dict[str, Any]] = []
    for name in LAYER_ORDER:
        target, cap = layer_limit(settings, name)
        f = fitted[name]
        rows.append(
            {
                "name": name,
                "tokens": f.tokens,
                "target": target,
                "cap": cap,
                "stable": name in STABLE_LAYERS,
                "items": len(layers[name].entries),
                "kept": len(f.kept),
                "truncated": [c.as_dict() for c in f.cuts],
                "why": why.get(name, ""),
            }
        )
    return rows


def context_report(
    *,
    settings: Settings,
    counter: str,
    memory: bool,
    topic_problems: Sequence[str],
    layers: dict[str, Layer],
    fitted: dict[str, Fitted],
    total: int,
    over: str,
    breakpoints: list[str],
    scores: list[TopicScore],
    query: str,
    notes: list[str],
    rejected: list[dict[str, str]],
    skipped: dict[str, str],
    why: dict[str, str],
) -> dict[str, Any]:
    """The report of one composition (`counter` the token counter's backend, `memory` whether
    the assembler has a memory view); a persona over its cap adds a note to `notes`."""
    rows = layer_rows(settings, layers, fitted, why)
    persona, persona_cap = fitted["persona"].tokens, layer_limit(settings, "persona")[1]
    if persona > persona_cap:
        notes.append(
            f"persona is {persona} tokens, over its cap of {persona_cap}; persona is never truncated"
        )
    return {
        "budget": settings.context.total_budget,
        "total_tokens": total,
        "stable_tokens": sum(fitted[n].tokens for n in LAYER_ORDER if n in STABLE_LAYERS),
        "over_budget": over,
        "counter": counter,
        "cache_breakpoints": breakpoints,
        "memory": ("unavailable" if not memory else "store away" if skipped else "available"),
        # The layers left out because the store's server was away, and why.
        "skipped_layers": [
            {"layer": ASK_LAYERS.get(call, call), "read": call, "reason": reason}
            for call, reason in sorted(skipped.items())
        ],
        "layers": rows,
        "topics": {
            "point": "system_prompt",
            "query_chars": len(query),
            "scores": [s.as_dict() for s in scores],
            "chosen": [s.id for s in scores if s.selected],
            "problems": list(topic_problems),
        },
        "rejected_contributions": rejected,
        "memory_origins": sorted(
            {e.origin for f in fitted.values() for e in f.kept if e.tail == MEMORY_CLOSE}
        ),
        "notes": notes,
    }
