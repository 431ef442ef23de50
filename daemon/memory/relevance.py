"""How well a search result matches its question, on a scale a person can read (0–100).

The ranking score fuses reciprocal ranks: it orders results, but its value (0.02–0.06 for
everything) says nothing about whether a result answers anything. The *match* does:

- **by words**: the share of the question's words the result uses, each word weighted by
  its IDF in memory (a speaker's name on half the history counts for little, "bees" a lot);
- **by meaning**: the embedder's cosine between the question and the result, rescaled so
  that an unrelated line is 0 and a close paraphrase 100 (`COSINE_SCALE`).

The match is the larger of the two, so a paraphrase that shares no word still matches and a
result that uses every word of the question matches fully. Results below `FLOOR` share
(almost) nothing with the question: `memory search` and the console show them apart, as
weak matches, and `recall` does not read them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Results matching less than this share nothing the question is about (docs/memory.md,
# "Readable scores"; its cost on recall is measured in bench/README.md).
FLOOR = 20

# Cosine → 0 and → 100 per embedder. For all-MiniLM-L6-v2: "bees" against "hello! I'm new
# here" is 0.15, against "the hive swarmed last week" 0.39, "honey harvest was great" 0.42;
# "what colour did we choose for the baby's room?" against "we picked terracotta for the
# nursery walls" 0.51; "bees" against "I started keeping bees" 0.70. An embedder may carry
# its own `relevance_scale` (low, high); others get MiniLM's.
COSINE_SCALE: dict[str, tuple[float, float]] = {"all-MiniLM-L6-v2": (0.25, 0.75)}
DEFAULT_SCALE = COSINE_SCALE["all-MiniLM-L6-v2"]


@dataclass(frozen=True, kw_only=True)
class Match:
    """A result's match with its question: overall, and its two parts (0–100 each)."""

    relevance: int
    words: int
    meaning: int | None  # None: no vector to compare (no embedder, or not embedded yet)

    @property
    def below_floor(self) -> bool:
        return self.relevance < FLOOR


def scale_for(embedder: object) -> tuple[float, float]:
    """The cosine range an embedder's similarities are read on (its own, else MiniLM's)."""
    own = getattr(embedder, "relevance_scale", None)
    if own is not None:
        low, high = own
        return float(low), float(high)
    return COSINE_SCALE.get(str(getattr(embedder, "name", "")), DEFAULT_SCALE)


def match(words_share: float, cosine: float | None, scale: tuple[float, float]) -> Match:
    """Combine the share of the question's (weighted) words and the cosine into a `Match`."""
    words = _percent(words_share)
    meaning = None
    if cosine is not None:
        low, high = scale
        meaning = _percent((cosine - low) / (high - low)) if high > low else 0
    return Match(relevance=max(words, meaning or 0), words=words, meaning=meaning)


def _percent(share: float) -> int:
    return round(100 * min(1.0, max(0.0, share)))
