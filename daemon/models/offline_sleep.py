"""The offline model's wake-up letter: an extractive `WAKE.md`, so a daemon with no key still sleeps usefully.

It reads the `wake` message format (see `daemon.models.base`) and picks, without inventing
anything: where things stand (the session summary's sentences), the facts (remembered facts
first, then what the person said about themselves or their world in passing), the decisions,
and the open questions (questions the person asked last, unanswered threads). The letter is
cut to the token limit the request names, keeping the sections' first lines.
"""

from __future__ import annotations

import re

from daemon.tokens import count_tokens

_HEADING = "# Wake-up notes"
_LINE = re.compile(r"\s*\[(?P<role>[^\]]+)\]\s*(?P<text>.*)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Sentences a person says in passing that carry a fact worth keeping across the night.
_FACTUAL = re.compile(
    r"\b(?:my|our|i'm|i am|i've|i have|i live|i work|i was|i will|i'll|we're|we are|we have|is called|"
    r"named|lives|works|moved|born|birthday|allergic|prefer|favourite|favorite|booked|starts|due)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:decided|decision|agreed|chose|chosen|settled|committed|let's|we'll|going to|plan to|will)\b",
    re.IGNORECASE,
)
# What the offline chat model itself says carries nothing worth waking up to.
_OFFLINE_NOISE = (
    "offline model",
    "not a language model",
    "tool returned",
    "tool reported",
    "you said:",
    "anthropic_api_key",
    "configure a provider",
    "can't hold a real conversation",
    "store and recall memories",
    "(no summary)",  # the wake prompt's own placeholder
)
_COMMAND = re.compile(
    r"^(?:(?:please|ok|okay|hey|can you|could you)[, ]+)*(?:remember(?: that)?|note(?: that|:)|"
    r"make a note(?: that|:)?|keep in mind(?: that)?|don'?t forget(?: that)?)\s+",
    re.IGNORECASE,
)


_SPEAKER = re.compile(r"\s+(?=(?:The person|Reverie|The agent):)")


def is_offline_chatter(text: str) -> bool:
    """Whether `text` is the offline model talking about itself (or echoing), not the day's content."""
    low = text.lower()
    return any(n in low for n in _OFFLINE_NOISE)


_noise = is_offline_chatter


def section(text: str, name: str) -> str:
    """The body of `NAME:` up to the next all-caps `WORD:` line (or the end)."""
    found = re.search(rf"(?m)^{name}:[ \t]*(.*)$", text)
    if not found:
        return ""
    rest = text[found.start(1) :]
    end = re.search(r"(?m)^[A-Z][A-Z_ ]+:[ \t]*", rest[len(found.group(1)) :])
    body = rest if end is None else rest[: len(found.group(1)) + end.start()]
    return body.strip()


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in text.splitlines():
        out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


def _narrative(summary: str) -> str:
    """A summary file's narrative: its title and its sections after the story left out.

    The sections (`## Work done`: "called remember", "ran `ls`"; `## Decisions`) are lists for
    their own parts of the letter, never where things stand.
    """
    kept: list[str] = []
    for line in summary.splitlines():
        if line.startswith("## "):
            break
        if not line.startswith("#"):
            kept.append(line)
    return "\n".join(kept)


def _clip(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def _turns(transcript: str) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for line in transcript.splitlines():
        found = _LINE.match(line)
        if found:
            turns.append((found["role"].strip().lower(), found["text"].strip()))
        elif line.strip() and turns:
            role, prior = turns[-1]
            turns[-1] = (role, f"{prior} {line.strip()}")
    return turns


def _unique(items: list[str], limit: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = re.sub(r"\W+", " ", item.lower()).strip()
        if key and key not in seen:
            seen.add(key)
            out.append(item)
        if len(out) >= limit:
            break
    return out


def weave_wake(message_text: str) -> str:
    """The extractive WAKE.md for a `wake` request (a pure function of its text)."""
    date = section(message_text, "DATE") or "the last sleep"
    limit = (
        int(section(message_text, "LIMIT").split()[0])
        if section(message_text, "LIMIT")[:1].isdigit()
        else 600
    )
    summary = _narrative(section(message_text, "SUMMARY"))
    decisions_given = [
        ln.lstrip("-• ").strip()
        for ln in section(message_text, "DECISIONS").splitlines()
        if ln.strip()
    ]
    memories = [ln.strip() for ln in section(message_text, "MEMORIES").splitlines() if ln.strip()]
    turns = _turns(section(message_text, "TRANSCRIPT"))
    person = [t for role, t in turns if role == "user"]

    # An extractive summary interleaves speakers ("The person: … Reverie: …"): judge each part alone.
    parts_said = [p for p in _SPEAKER.split(summary) if p.strip()]
    standing = [_clip(s) for p in parts_said for s in _sentences(p) if not _noise(s)][:3]
    if not standing and person:
        standing = [
            f"They said: {_clip(s)}" for text in person for s in _sentences(text) if not _noise(s)
        ][:3]
    facts: list[str] = []
    for line in memories:
        # Explicit facts only: summaries are already in the standing, chunks are raw talk.
        found = re.match(r"^\[(?P<id>[^\]]+)\]\s*(?:\([^)]*\)\s*)?(?P<body>.*)$", line)
        if found and found["id"].startswith(("fact", "profile")) and found["body"]:
            facts.append(_clip(found["body"], 200))
    for text in person:
        for sentence in _sentences(text):
            sentence = _COMMAND.sub("", sentence).strip()
            if _FACTUAL.search(sentence) and not sentence.rstrip().endswith("?"):
                facts.append(_clip(sentence.rstrip(" ."), 200))
    decisions = [d for d in decisions_given if not _noise(d)]
    for text in person:
        decisions.extend(
            _clip(s) for s in _sentences(text) if _DECISION.search(s) and not s.endswith("?")
        )
    questions = [_clip(s) for text in person[-6:] for s in _sentences(text) if s.endswith("?")]
    # The journal's open questions are older than the day's own: they come after, newest first.
    journal_open = [
        _clip(ln.strip()[len("- open:") :].strip())
        for ln in section(message_text, "JOURNAL").splitlines()
        if ln.strip().startswith("- open:")
    ]

    parts = [
        _HEADING,
        "",
        f"Written when I went to sleep ({date}) by the offline model: sentences picked from the day, not a reflection.",
    ]
    for title, items, cap in (
        ("Where things stand", standing or ["A quiet day: nothing new was said."], 3),
        ("Facts to keep in mind", _unique(facts, 12), 12),
        ("Decisions", _unique(decisions, 6), 6),
        ("Open questions", _unique(questions[::-1] + journal_open, 4), 4),
    ):
        if items:
            parts += ["", f"## {title}", *(f"- {item}" for item in items[:cap])]
    return fit_tokens("\n".join(parts), limit)


def fit_tokens(text: str, limit: int) -> str:
    """Drop bullet lines from the end of the longest sections until `text` fits `limit` tokens."""
    lines = text.splitlines()
    while count_tokens("\n".join(lines)) > limit:
        bullets = [i for i, ln in enumerate(lines) if ln.startswith("- ")]
        if not bullets:
            return _clip("\n".join(lines), limit * 3)
        lines.pop(bullets[-1])
    return "\n".join(lines)
