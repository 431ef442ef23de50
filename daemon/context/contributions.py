"""Other handlers' contributions to a turn's prompt, merged into the assembler's layers.

A contribution may only enter a layer listed in `CONTRIBUTABLE`, and one from an untrusted
origin (tools, imports) only a layer in `UNTRUSTED_ALLOWED`; each enters as a labelled memory
block (topics as plain addenda), ranked after the assembler's own entries in the order of
its priority. A rejected contribution is logged and reported, never merged.
"""

from __future__ import annotations

from collections.abc import Sequence

from daemon.context.budget import LAYER_ORDER
from daemon.context.layers import Entry, Layer, is_untrusted, memory_block
from daemon.events import Contribution
from daemon.log import get_logger

log = get_logger("context")

# Layers other handlers may contribute to, and the subset that may carry untrusted text.
CONTRIBUTABLE = frozenset(
    {"profile", "wake", "themes", "recollections", "recall", "topics", "journal"}
)
UNTRUSTED_ALLOWED = frozenset({"themes", "recollections", "recall", "journal"})


def refusal(c: Contribution) -> str:
    """Why `c` may not be merged ("" when it may)."""
    if c.layer not in LAYER_ORDER:
        return f"unknown layer '{c.layer}'; layers are {list(LAYER_ORDER)}"
    if c.layer not in CONTRIBUTABLE:
        return f"the {c.layer} layer is built only by the assembler"
    if is_untrusted(c.origin) and c.layer not in UNTRUSTED_ALLOWED:
        return f"origin '{c.origin}' is untrusted and may not enter the {c.layer} layer"
    if not c.text.strip():
        return "empty text"
    return ""


def merge_contributions(
    layers: dict[str, Layer], contributions: Sequence[Contribution]
) -> list[dict[str, str]]:
    """Add each acceptable contribution to its layer (in place); return the rejected ones."""
    rejected: list[dict[str, str]] = []
    ordered = sorted(enumerate(contributions), key=lambda pair: (pair[1].priority, pair[0]))
    for seq, (_, c) in enumerate(ordered):
        label = c.source or c.origin
        why = refusal(c)
        if why:
            rejected.append(
                {"layer": c.layer, "origin": c.origin, "source": c.source, "reason": why}
            )
            log.warning(
                "context contribution rejected",
                layer=c.layer,
                origin=c.origin,
                source=c.source,
                reason=why,
            )
            continue
        layer = layers[c.layer]
        key = f"contribution:{label}:{seq}"
        rank = 1000 + seq
        if c.layer == "topics":
            entry = Entry(key=key, body=c.text.strip(), rank=rank, origin=c.origin)
        else:
            entry = memory_block(key, c.text, origin=c.origin, source=c.source, ts=c.ts, rank=rank)
        layer.entries.append(entry)
    return rejected
