"""The offline model's dreams: extractive and conservative.

Reads the `dream` prompt (`daemon.sleep.dreams`: `<<<MATERIAL`, `<<<TOPICS`, `<<<TOPIC id`
sections) and answers in the dream reply format, with no language model:

- the journal entry lists what happened (each trusted summary's title and first sentence,
  each new fact) and the decisions taken (from summaries, and from the messages of sessions
  not summarised yet), citing the memories;
- a revision is proposed only when there is real material: decisions from trusted summaries
  that share a trigger word with a shown topic and are not in its addendum yet are appended
  as a short "Lessons" bullet list (at most three per topic), citing their sources;
- it never proposes a new topic and never draws on memories of untrusted origin.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from daemon.text import STOP_WORDS, stem

UNTRUSTED = frozenset({"tool", "import"})
_HEAD = re.compile(
    r"^\[(?P<uid>[^\]\s]+)\] \((?P<origin>[a-z]+), (?P<day>[0-9-]+)\)(?: (?P<title>.*))?$"
)
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ECHO_MARKS = (
    "you said:",
    "offline model",
    "not a language model",
    "tool returned",
    "tool reported",
)
# In a raw message only a settled decision counts ("let's talk about…" is not one).
_DECIDED = re.compile(
    r"\b(decided|agreed|chose|settled on|committed to|we'll|i'll|we will|i will|going to)\b", re.I
)
_SPEAKER = re.compile(r"^[^:]{1,80}\(\d{1,2} [A-Z][a-z]+ \d{4}\): ")
LESSONS = "## Lessons"
# How a decision is phrased says nothing about its domain ("we decided to…" is not about decisions).
_DECIDING = re.compile(
    r"\b(decided|decide|decision|agreed|agree|will|won't|chose|choose|chosen|plan|planned|going to|"
    r"settled|committed|let's|we'll|i'll|resolved)\b",
    re.IGNORECASE,
)
_PER_TOPIC = 3
# Extracts pile up; condensing them takes a real model. The offline dream stops adding here.
_MAX_LESSONS = 12


@dataclass(frozen=True, kw_only=True)
class Item:
    uid: str
    origin: str
    day: str
    title: str
    text: str

    @property
    def trusted(self) -> bool:
        return self.origin not in UNTRUSTED


def _section(text: str, start: str, end: str) -> str:
    _, found, rest = text.partition(start)
    return rest.split(end, 1)[0].strip("\n") if found else ""


def parse_material(text: str) -> list[Item]:
    items: list[Item] = []
    head: dict[str, str] | None = None
    body: list[str] = []
    for line in [*_section(text, "<<<MATERIAL\n", "\nMATERIAL>>>").splitlines(), ""]:
        m = _HEAD.match(line)
        if m:
            if head is not None:
                items.append(Item(text="\n".join(body).strip(), **head))
            head = {
                "uid": m["uid"],
                "origin": m["origin"],
                "day": m["day"],
                "title": (m["title"] or "").strip(),
            }
            body = []
        elif head is not None:
            body.append(line)
    if head is not None:
        items.append(Item(text="\n".join(body).strip(), **head))
    return items


def parse_topics(text: str) -> tuple[dict[str, list[frozenset[str]]], dict[str, str]]:
    """(each topic's triggers as stem sets, full text of each shown topic).

    As in the router, a phrase trigger ("timeout error") matches only when all its words do.
    """
    triggers: dict[str, list[frozenset[str]]] = {}
    for line in _section(text, "<<<TOPICS\n", "\nTOPICS>>>").splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[2].startswith("triggers:"):
            phrases = [*parts[2][len("triggers:") :].split(","), parts[0].replace("-", " ")]
            triggers[parts[0]] = [t for t in (frozenset(_stems(p)) for p in phrases) if t]
    shown = {m[1]: m[2] for m in re.finditer(r"<<<TOPIC (\S+)\n(.*?)\nTOPIC>>>", text, re.DOTALL)}
    return triggers, shown


def _stems(text: str) -> set[str]:
    return {stem(w) for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOP_WORDS}


def _decisions(item: Item) -> list[str]:
    _, found, rest = item.text.partition("## Decisions")
    if not found:
        return []
    out = []
    for line in rest.splitlines():
        if line.startswith("## "):
            break
        if line.lstrip().startswith("- "):
            out.append(" ".join(line.lstrip()[2:].split()))
    return out


def _echo(sentence: str) -> bool:
    """The offline chat model's own words (it echoes the person and explains itself): no lesson."""
    low = sentence.lower()
    return any(mark in low for mark in _ECHO_MARKS)


def _decided_in(item: Item) -> list[str]:
    """Decision sentences of one message (a chunk reads "who (date): text")."""
    text = _SPEAKER.sub("", " ".join(item.text.split()), count=1)
    return [
        s for s in _SENTENCE_END.split(text) if _DECIDED.search(s) and not s.rstrip().endswith("?")
    ]


def _first_sentence(item: Item) -> str:
    body = "\n".join(
        ln for ln in item.text.split("## Decisions", 1)[0].splitlines() if not ln.startswith("#")
    )
    first = _SENTENCE_END.split(" ".join(body.split()), 1)[0]
    return first if len(first) <= 240 else first[:240].rsplit(" ", 1)[0] + " …"


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _lesson_count(current: str) -> int:
    _, found, rest = current.partition(f"\n{LESSONS}\n")
    if not found:
        return 0
    section = rest.split("\n## ", 1)[0]
    return sum(1 for line in section.splitlines() if line.startswith("- "))


def _with_lessons(current: str, bullets: list[str]) -> str:
    text = current.rstrip("\n")
    tail = text.rsplit("\n## ", 1)
    last_heading = ("## " + tail[1]).splitlines()[0] if len(tail) == 2 else ""
    if last_heading.strip() == LESSONS:
        return text + "\n" + "\n".join(bullets) + "\n"
    return text + f"\n\n{LESSONS}\n\n" + "\n".join(bullets) + "\n"


def dream(message_text: str) -> dict[str, Any]:
    """An extractive dream in the `dream` reply format (see the module docstring)."""
    items = parse_material(message_text)
    trusted = [i for i in items if i.trusted]
    untrusted = len(items) - len(trusted)
    lines = [
        "Offline dream (extractive: no language model is configured, so this recalls rather than reflects)."
    ]
    happened = [
        f"- {i.day} — {i.title or i.uid}: {_first_sentence(i)} [{i.uid}]"
        for i in trusted
        if i.uid.startswith("summary:")
    ]
    said = [i for i in trusted if i.uid.startswith("chunk:")]
    facts = [f"- {i.text} [{i.uid}]" for i in trusted if i.uid.startswith(("fact:", "profile:"))]
    decided = [(d, i) for i in trusted if i.uid.startswith("summary:") for d in _decisions(i)]
    decided += [(d, i) for i in said for d in _decided_in(i)]
    decided = [(d, i) for d, i in decided if not _echo(d)]
    if happened:
        lines += ["", "What happened:", *happened]
    if said:
        lines += ["", f"Not summarised yet: {len(said)} message(s) of the sessions still open."]
    if facts:
        lines += ["", "What I was asked to remember:", *facts]
    if decided:
        lines += ["", "What was decided:", *[f"- {d} [{i.uid}]" for d, i in decided]]
    if untrusted:
        lines += [
            "",
            f"({untrusted} imported or tool memories were left out of this reflection: untrusted origin.)",
        ]

    triggers, shown = parse_topics(message_text)
    revisions = []
    for tid, current in shown.items():
        wanted = triggers.get(tid, [])
        have = _normal(current)
        bullets: list[str] = []
        sources: list[str] = []
        room = min(_PER_TOPIC, _MAX_LESSONS - _lesson_count(current))
        for decision, item in decided:
            if len(bullets) >= room:
                break
            # A message's domain shows in the whole message; a summary covers several, so only
            # the decision's own words count there.
            context = (
                decision
                if item.uid.startswith("summary:")
                else _SPEAKER.sub("", item.text, count=1)
            )
            words = _stems(_DECIDING.sub(" ", context))
            if not any(t <= words for t in wanted) or _normal(decision) in have:
                continue
            bullets.append(f"- {decision} ({item.day})")
            sources.append(item.uid)
        if bullets:
            revisions.append({
                "topic": tid,
                "text": _with_lessons(current, bullets),
                "why": f"{len(bullets)} decision(s) from recent sessions bear on {tid}",
                "sources": list(dict.fromkeys(sources)),
            })  # fmt: skip
    return {"entry": "\n".join(lines), "revisions": revisions, "new_topics": []}


def dream_reply(message_text: str) -> str:
    return json.dumps(dream(message_text), ensure_ascii=False)
