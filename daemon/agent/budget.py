"""Working memory within the model's window: what of the history a request can carry.

A request is the system prompt, the tool specs, the replayed history (whole past turns) and
the turn in progress (the message, then each model step and its tool results). It must
never exceed the window less the reply's `max_tokens` and a safety margin for counting
error — whatever the history, the message, or the tools return. `fit_request` keeps:

1. the newest past turns whole, as many as fit (at least `min_turns` when they fit);
2. when even those do not fit, the older blocks of the kept turns are shortened (largest
   first, with a visible marker), then the oldest kept turns dropped;
3. when the turn in progress alone is too big, its older tool results are shortened, and
   last of all the message itself (head and tail kept).

Cutting is deterministic: the same inputs give the same request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from daemon.models.base import Block, Message, TextBlock, ToolResultBlock, ToolSpec, ToolUseBlock
from daemon.tokens import TokenCounter

# Per-message framing the providers add (role, separators), in tokens.
MESSAGE_OVERHEAD = 4
_MIN_KEEP_CHARS = 400


@dataclass(frozen=True, kw_only=True)
class RequestBudget:
    window: int
    reserve_output: int
    margin: float = 0.05
    min_turns: int = 6

    @property
    def limit(self) -> int:
        """The most a request's input may take, in tokens."""
        return max(256, int(self.window * (1 - self.margin)) - self.reserve_output)


@dataclass(kw_only=True)
class FittedRequest:
    messages: list[Message]
    tokens: int
    history_turns: int
    history_tokens: int
    dropped_turns: int = 0
    shortened_blocks: int = 0
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {
            "request_tokens": self.tokens,
            "history_turns": self.history_turns,
            "history_tokens": self.history_tokens,
            "dropped_turns": self.dropped_turns,
            "shortened_blocks": self.shortened_blocks,
            "notes": list(self.notes),
        }


def block_text(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ToolResultBlock):
        return block.content
    if isinstance(block, ToolUseBlock):
        return f"{block.name} {json.dumps(block.input, ensure_ascii=False, sort_keys=True)}"
    return str(getattr(block, "text", "") or getattr(block, "content", ""))


class RequestSizer:
    """Counts requests with the calibrated counter (texts memoised: history repeats each step)."""

    def __init__(self, counter: TokenCounter, cache_max: int = 50_000) -> None:
        self.counter = counter
        self._cache: dict[str, int] = {}
        self._cache_max = cache_max
        self._basis = counter.basis

    def text(self, text: str) -> int:
        if self.counter.basis != self._basis:
            self._cache.clear()
            self._basis = self.counter.basis
        n = self._cache.get(text)
        if n is None:
            if len(self._cache) >= self._cache_max:
                self._cache.clear()
            n = self._cache[text] = self.counter.count(text)
        return n

    def message(self, message: Message) -> int:
        return MESSAGE_OVERHEAD + sum(self.text(block_text(b)) for b in message.content)

    def messages(self, messages: list[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def tools(self, specs: tuple[ToolSpec, ...]) -> int:
        return sum(
            self.text(f"{s.name}\n{s.description}\n{json.dumps(s.input_schema, sort_keys=True)}")
            for s in specs
        )


def _shorten(block: Block, keep_tokens: int, sizer: RequestSizer) -> Block:
    """`block` cut to about `keep_tokens` (head and tail kept, with a marker); others as they are."""
    text = block_text(block)
    total = sizer.text(text)
    if total <= keep_tokens or isinstance(block, ToolUseBlock):
        return block
    ratio = max(0.0, keep_tokens / max(1, total))
    keep_chars = max(_MIN_KEEP_CHARS if keep_tokens > 0 else 0, int(len(text) * ratio) - 80)
    keep_chars = min(keep_chars, len(text))
    head, tail = (
        text[: keep_chars * 2 // 3],
        text[len(text) - keep_chars // 3 :] if keep_chars // 3 else "",
    )
    marker = f"\n[…{len(text) - len(head) - len(tail)} characters not replayed to fit the context window…]\n"
    cut = head + marker + tail
    if isinstance(block, TextBlock):
        return replace(block, text=cut)
    if isinstance(block, ToolResultBlock):
        return replace(block, content=cut)
    return block


def _shrink(
    messages: list[Message], excess: int, sizer: RequestSizer, *, protect_last: int = 0
) -> tuple[list[Message], int, int]:
    """Shorten the largest blocks (oldest first among equals) until `excess` tokens are freed.

    The last `protect_last` messages are left alone. Returns (messages, freed, shortened).
    """
    out = list(messages)
    candidates: list[tuple[int, int, int]] = []  # (-tokens, message index, block index)
    for mi, m in enumerate(out[: len(out) - protect_last] if protect_last else out):
        for bi, b in enumerate(m.content):
            if isinstance(b, ToolUseBlock):
                continue
            n = sizer.text(block_text(b))
            if n > 64:
                candidates.append((-n, mi, bi))
    candidates.sort()
    freed = shortened = 0
    for neg, mi, bi in candidates:
        if freed >= excess:
            break
        size = -neg
        want = max(0, size - (excess - freed))
        m = out[mi]
        blocks = list(m.content)
        new = _shorten(blocks[bi], want, sizer)
        gained = size - sizer.text(block_text(new))
        if gained <= 0:
            continue
        blocks[bi] = new
        out[mi] = Message(role=m.role, content=tuple(blocks))
        freed += gained
        shortened += 1
    return out, freed, shortened


def fit_request(
    *,
    turns: list[list[Message]],
    current: list[Message],
    fixed_tokens: int,
    budget: RequestBudget,
    sizer: RequestSizer,
    max_messages: int | None = None,
) -> FittedRequest:
    """The messages of one request: as much history as fits beside `current` (see module doc).

    `turns` are the past turns, oldest first, each starting with a user message;
    `fixed_tokens` is what the system prompt and tool specs take.
    """
    limit = budget.limit - fixed_tokens
    notes: list[str] = []
    shortened = 0
    current_tokens = sizer.messages(current)
    if current_tokens > limit:
        # The turn in progress alone is too big: older tool results first, then the message.
        current, _, n = _shrink(
            current, current_tokens - limit, sizer, protect_last=1 if len(current) > 1 else 0
        )
        shortened += n
        current_tokens = sizer.messages(current)
        if current_tokens > limit:
            current, _, n = _shrink(current, current_tokens - limit, sizer)
            shortened += n
            current_tokens = sizer.messages(current)
        notes.append("the turn in progress was shortened to fit the window")
    available = max(0, limit - current_tokens)
    # Walk from the newest turn back, sizing only what is looked at: cost follows what fits.
    kept: list[list[Message]] = []
    used = 0
    count = 0
    for turn in reversed(turns):
        if max_messages is not None and count + len(turn) > max_messages:
            break
        size = sizer.messages(turn)
        if used + size > available and len(kept) >= budget.min_turns:
            break
        kept.append(turn)
        used += size
        count += len(turn)
    kept.reverse()
    if used > available:
        # The newest turns alone are over: shorten their blocks, then drop the oldest.
        flat = [m for t in kept for m in t]
        flat, _, n = _shrink(flat, used - available, sizer)
        shortened += n
        rebuilt: list[list[Message]] = []
        i = 0
        for t in kept:
            rebuilt.append(flat[i : i + len(t)])
            i += len(t)
        kept = rebuilt
        used = sum(sizer.messages(t) for t in kept)
        while kept and used > available:
            used -= sizer.messages(kept.pop(0))
        notes.append("recent turns were shortened to fit the window")
    dropped = len(turns) - len(kept)
    if dropped:
        notes.append(f"{dropped} older turn(s) not replayed (over the window)")
    messages = [m for t in kept for m in t] + list(current)
    return FittedRequest(
        messages=messages,
        tokens=fixed_tokens + used + current_tokens,
        history_turns=len(kept),
        history_tokens=used,
        dropped_turns=dropped,
        shortened_blocks=shortened,
        notes=notes,
    )
