"""The layers' order and their token budget: each layer fitted to its cap, then cut to the total.

`LAYER_ORDER` is the order of the prompt (stable first, for the provider's prompt cache);
`TRUNCATION_ORDER` the order in which layers give way when the total is over
`context.total_budget` — first down to their target, then to nothing (the journal only down to
its reserve). Discipline, persona and the clock line are never cut. The assembler
(`daemon.context.assembler`) gathers the layers; this module decides what of them fits.
"""

from __future__ import annotations

from daemon.context.layers import Count, Cut, Fitted, Layer, fit
from daemon.log import get_logger
from daemon.models.base import SystemBlock
from daemon.settings import Settings

log = get_logger("context")

LAYER_ORDER: tuple[str, ...] = (
    "discipline", "persona", "profile", "wake", "reflection", "themes", "recollections",
    "time", "away", "handover", "threads", "recall", "knowledge", "topics", "journal",
)  # fmt: skip
CORE_LAYERS = frozenset({"discipline", "persona", "profile", "wake"})
# The last dream's reflection changes once a night, like the wake-up notes: a stable layer.
STABLE_LAYERS = frozenset({*CORE_LAYERS, "reflection", "themes", "recollections"})
# Automatic recall gives way before the journal, and the journal never below its reserve
# (`journal.context_reserved_tokens`): the thread of long-running work survives trimming.
TRUNCATION_ORDER: tuple[str, ...] = (
    "handover",
    "recall",
    "reflection",
    "journal",
    "recollections",
    "themes",
    "knowledge",
    "topics",
    "threads",
    "away",
    "wake",
    "profile",
)
NEVER_CUT = frozenset({"discipline", "persona", "time"})


def layer_limit(settings: Settings, name: str) -> tuple[int, int]:
    """The layer's (target, cap) in tokens; recall's cap is also `memory.auto_recall_tokens`."""
    budget = settings.context.layers[name]
    cap = budget.cap
    if name == "recall":
        cap = min(cap, settings.memory.auto_recall_tokens)
    return min(budget.target, cap), cap


def fit_layers(
    layers: dict[str, Layer], settings: Settings, count: Count
) -> tuple[dict[str, Fitted], str]:
    """Fit each layer to its cap, then cut in `TRUNCATION_ORDER` until the total fits.

    Returns the fitted layers and, when even the never-cut layers overflow, why it is over.
    """
    budget = settings.context.total_budget
    fitted: dict[str, Fitted] = {}
    for name in LAYER_ORDER:
        _, cap = layer_limit(settings, name)
        fitted[name] = fit(
            layers[name], cap, count, reason=f"over the {name} layer cap of {cap} tokens"
        )

    def total() -> int:
        present = [f for f in fitted.values() if f.text]
        return sum(f.tokens for f in present) + max(0, len(present) - 1)

    for floor_of in ("target", "zero"):
        for name in TRUNCATION_ORDER:
            excess = total() - budget
            if excess <= 0:
                break
            target, _ = layer_limit(settings, name)
            floor = target if floor_of == "target" else 0
            if name == "journal":
                floor = max(floor, settings.journal.context_reserved_tokens)
            current = fitted[name]
            if current.tokens <= floor:
                continue
            limit = max(floor, current.tokens - excess)
            why = f"total budget {budget}: {name} reduced to {limit} tokens"
            refit = fit(layers[name], limit, count, reason=why)
            fitted[name] = Fitted(
                name=name,
                text=refit.text,
                tokens=refit.tokens,
                kept=refit.kept,
                cuts=_keep_first_reasons(current.cuts, refit.cuts),
            )
    over = ""
    if total() > budget:
        fixed = sum(fitted[n].tokens for n in NEVER_CUT)
        over = (
            f"over budget by {total() - budget} tokens: discipline, persona and time alone take {fixed} "
            f"of {budget}; raise context.total_budget or shorten the persona"
        )
        log.warning("context over budget", total=total(), budget=budget, fixed=fixed)
    return fitted, over


def cache_blocks(fitted: dict[str, Fitted]) -> tuple[list[SystemBlock], list[str]]:
    """The present layers as system blocks, with a cache breakpoint after the last core layer
    and after the last stable one; returns the blocks and the layers that carry a breakpoint."""
    present = [n for n in LAYER_ORDER if fitted[n].text]
    marks: list[str] = []
    for group in (CORE_LAYERS, STABLE_LAYERS):
        last = [n for n in present if n in group]
        if last and last[-1] not in marks:
            marks.append(last[-1])
    blocks = [SystemBlock(text=fitted[n].text, cache_breakpoint=n in marks) for n in present]
    return blocks, marks


def _keep_first_reasons(before: tuple[Cut, ...], after: tuple[Cut, ...]) -> tuple[Cut, ...]:
    """Report a cut under the reason that first caused it (the layer cap, or the total budget)."""
    first = {(c.key, c.action): c for c in before}
    return tuple(first.get((c.key, c.action), c) for c in after)
