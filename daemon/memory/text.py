"""Small text tools the memory behaviours share: content words, slugs, lenient JSON replies."""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from typing import Any

from daemon.text import STOP_WORDS, stem

__all__ = ["STOP_WORDS", "content_words", "keywords", "parse_json_reply", "slugify", "stem"]


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def content_words(text: str) -> list[str]:
    """Lowercase content words of `text` in order (stop words, 1-letter words and numbers out)."""
    out = []
    for w in _WORD.findall(text.lower().replace("’", "'")):
        w = w.removesuffix("'s")
        if len(w) > 1 and w not in STOP_WORDS and not w.isdigit():
            out.append(w)
    return out


def keywords(text: str, n: int) -> list[str]:
    """The `n` most frequent content words (ties: first occurrence)."""
    words = [w for w in content_words(text) if len(w) > 2]
    counts = Counter(words)
    order = {w: i for i, w in reversed(list(enumerate(words)))}
    return sorted(counts, key=lambda w: (-counts[w], order[w]))[:n]


def slugify(text: str, *, max_words: int = 6, max_chars: int = 60) -> str:
    """Kebab-case ASCII keywords: "Dentist booking — March!" → "dentist-booking-march"."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    parts = [p for p in re.split(r"[^a-z0-9]+", ascii_text) if p][:max_words]
    slug = "-".join(parts)
    while len(slug) > max_chars and "-" in slug:
        slug = slug.rsplit("-", 1)[0]
    return slug[:max_chars]


def parse_json_reply(reply: str) -> dict[str, Any] | None:
    """Find the JSON object in a model reply: bare, in a code fence, or wrapped in prose."""
    candidates = [reply.strip()]
    candidates += [m.strip() for m in _FENCE.findall(reply)]
    start = reply.find("{")
    if start != -1:
        candidates.append(reply[start : reply.rfind("}") + 1])
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            # Prose after the object ("{...} Hope this helps") — decode just the first value.
            try:
                value, _ = json.JSONDecoder().raw_decode(candidate)
            except ValueError:
                continue
        if isinstance(value, dict):
            return value
    return None


ADDENDA_HEADING = "## Topic Addenda"


def addenda_block(addenda: str) -> str:
    """The topic addenda as one system block under a single `## Topic Addenda` heading.

    The router's rendering already carries the heading; a caller-supplied text may not.
    Either way the heading appears exactly once ("" when there is nothing to add).
    """
    body = addenda.strip()
    while body.startswith(ADDENDA_HEADING):
        body = body[len(ADDENDA_HEADING) :].strip()
    return f"{ADDENDA_HEADING}\n\n{body}" if body else ""
