"""The offline model's journal entries: extractive, deterministic, no network.

The `journal` task's message holds the stretch of transcript between ``<<<TRANSCRIPT`` and
``TRANSCRIPT>>>``, one ``[role] text`` line each (``[user]``, ``[assistant]``, ``[tool NAME]``
for a call with its JSON input, ``[tool result]`` / ``[tool error]``). The reply is the JSON
object the journal expects: ``{"summary", "decisions", "progress", "open_questions",
"files_touched", "tags"}``. Sentences are picked, never invented; the journal also uses this
when the heartbeat model's answer is unusable or the model cannot be reached.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from daemon.models.offline_sleep import is_offline_chatter
from daemon.text import STOP_WORDS

_WORD = re.compile(r"[a-z0-9][a-z0-9'’-]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LINE = re.compile(r"^\s*\[(?P<role>[^\]]+)\]\s*(?P<text>.*)$")
_DECISION = re.compile(
    r"\b(decided|decide|decision|agreed|agree|chose|choose|chosen|settled|committed|let's|we'll|"
    r"going to|will use|plan is|resolved to)\b",
    re.IGNORECASE,
)
_PROGRESS = re.compile(
    r"\b(done|finished|fixed|wrote|written|added|completed|merged|passed|shipped|implemented|"
    r"created|updated|booked|sent|stored|saved|deployed|refactored|removed)\b",
    re.IGNORECASE,
)
_OPEN = re.compile(
    r"\b(todo|to do|next step|still need|not yet|open question|unclear|undecided|tbd)\b",
    re.IGNORECASE,
)
_FILE = re.compile(
    r"(?<![\w/.-])(?:~?/)?(?:[\w.-]+/)*[\w-]+\.(?:py|md|toml|jsonl?|txt|ya?ml|js|ts|tsx|rs|go|sh|sql|csv|html|css|c|h|cpp|java|rb|ini|cfg|lock)\b"
)
_SUMMARY_CHARS = 600
_ITEM_CHARS = 240


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _words(text: str) -> list[str]:
    words = (w.strip("'’-").lower() for w in _WORD.findall(text))
    return [w for w in words if len(w) > 2 and w not in STOP_WORDS and not w.isdigit()]


def _transcript(message_text: str) -> str:
    _, found, rest = message_text.partition("<<<TRANSCRIPT")
    if not found:
        return message_text
    return rest.split("TRANSCRIPT>>>", 1)[0]


def parse_lines(message_text: str) -> list[tuple[str, str]]:
    """The (role, text) lines of the journal message's transcript."""
    out: list[tuple[str, str]] = []
    for line in _transcript(message_text).splitlines():
        found = _LINE.match(line)
        if found:
            out.append((found["role"].strip().lower(), found["text"].strip()))
        elif line.strip() and out:
            role, prior = out[-1]
            out[-1] = (role, f"{prior} {line.strip()}")
    return out


def journal_entry(message_text: str) -> dict[str, Any]:
    """An extractive journal entry in the `journal` reply format."""
    lines = parse_lines(message_text)
    if not lines and _transcript(message_text).strip():
        lines = [("user", " ".join(_transcript(message_text).split()))]  # plain text: one message
    # The offline model's own replies (its self-introduction, echoes of tool output) are not
    # what happened: leaving them out keeps their words out of the summary, tags and files.
    lines = [(r, t) for r, t in lines if not (r == "assistant" and is_offline_chatter(t))]
    said = [(r, t) for r, t in lines if r in ("user", "assistant")]
    # What tools did reaches the entry as its own labelled work list (daemon.agent.work), never
    # through this transcript text.
    body = " ".join(t for _, t in said)
    counts = Counter(_words(body))
    scores = {w: n * math.log(2 + len(w)) for w, n in counts.items()}
    order = {w: i for i, w in reversed(list(enumerate(_words(body))))}
    tags = sorted(sorted(scores, key=lambda w: (-scores[w], order[w]))[:4], key=lambda w: order[w])

    def weight(sentence: str) -> float:
        words = set(_words(sentence))
        return sum(scores.get(w, 0.0) for w in words) / math.sqrt(len(words) + 4)

    asked = [s for r, t in said if r == "user" for s in _sentences(t)]
    replied = [s for r, t in said if r == "assistant" for s in _sentences(t)]
    parts: list[str] = []
    if asked:
        best = sorted(sorted(range(len(asked)), key=lambda i: -weight(asked[i]))[:2])
        parts.append("The person: " + " ".join(_clip(asked[i], 200) for i in best))
    if replied:
        parts.append("Reverie: " + _clip(replied[-1], 200))
    summary = _clip(" ".join(parts), _SUMMARY_CHARS) or "Activity with no readable text."

    decisions = [
        _clip(s, _ITEM_CHARS) for r, t in said for s in _sentences(t) if _DECISION.search(s)
    ]
    progress = [
        _clip(s, _ITEM_CHARS)
        for r, t in said
        if r == "assistant"
        for s in _sentences(t)
        if _PROGRESS.search(s)
    ]
    questions = [_clip(s, _ITEM_CHARS) for s in asked if s.endswith("?")][-3:]
    questions += [_clip(s, _ITEM_CHARS) for s in replied if _OPEN.search(s)][-2:]
    files = [m.group(0) for _, t in lines for m in _FILE.finditer(t)]
    return {
        "summary": summary,
        "decisions": list(dict.fromkeys(decisions))[:5],
        "progress": list(dict.fromkeys(progress))[:5],
        "open_questions": list(dict.fromkeys(questions))[:4],
        "files_touched": list(dict.fromkeys(files))[:10],
        "tags": tags,
    }


def respond(message_text: str) -> str:
    """The offline model's reply text for a `journal` request."""
    return json.dumps(journal_entry(message_text), ensure_ascii=False)
