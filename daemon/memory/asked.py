"""The message a turn is answering is not a memory to recall for it.

By the time a tool runs, the person's message that started the turn is stored with the
session's other messages, and an earlier identical message may be indexed too. Recall that
quoted it back ("You said: “what do you recall about my tea?”") would answer the question
with the question. `recall` (the tool) and automatic recall leave out, for that turn, the
message being answered and every message that says exactly the same words (whitespace,
case and closing punctuation aside).
"""

from __future__ import annotations

import re

# A chunk's speaker label: "user (28 November 2026): ", "Maya: ".
_LABEL = re.compile(r"^[^\n:()]{1,60}?\s*(?:\([^)\n]{1,40}\))?:\s*")
_CLOSING = " \t.!?…\"'”’"


def said_as(text: str) -> str:
    """`text` as compared with the message being answered: words case-folded, single-spaced."""
    return " ".join(text.split()).casefold().rstrip(_CLOSING)


def _asks(line: str, want: str) -> bool:
    return said_as(line) == want or said_as(_LABEL.sub("", line, count=1)) == want


def without_asked(text: str, asked: str) -> str:
    """A memory's `text` without its lines that say only the message being answered (with or
    without a speaker label); "" when nothing else is left."""
    want = said_as(asked)
    if not want or want not in said_as(text):
        return text
    lines = [line for line in text.split("\n") if not _asks(line, want)]
    return "\n".join(lines) if any(line.strip() for line in lines) else ""


def only_asks(text: str, asked: str) -> bool:
    """Whether a memory's `text` is only the message being answered said again."""
    return bool(said_as(asked)) and not without_asked(text, asked)
