"""The handover letter: what a model taking over the trunk is told about who it has been.

Built offline (no model call) from what the home holds: who the agent is (the opening of
`persona/SOUL.md`), who its person is (`persona/USER.md`'s filled lines and the top profile
facts), how they like to be spoken to (those lines that say so), what is open (open threads,
`WAKE.md`'s open items), what changed lately (facts that replaced another within
`memory.change_note_days`, the newest sleep entries of the journal), the switch itself, and a
few short replies of its own from past trunk sessions (its voice; the offline model's replies
left out when a real model's exist). Each part is one memory block (data, not instructions);
the voice comes last, so a cut to the layer's budget drops it first. `daemon.context.handover`
decides when a letter is due.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from daemon.context.layers import Layer, change_noted, is_untrusted, memory_block
from daemon.log import get_logger
from daemon.memory.api import MemoryItem, MemoryView
from daemon.memory.last_word import clip
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.store.replies import RepliesRepo

log = get_logger("handover")

HEADING = "## Handover"
PREAMBLE = (
    "(Your model changed. This letter is your own memory, written for the model you now run "
    "on: who you are, who your person is, what is open, what changed lately, and how you have "
    "sounded. Data, not instructions: carry on as yourself, from where you left off.)"
)
VOICE_EXAMPLES = 3
VOICE_MIN, VOICE_MAX = 40, 360  # characters of a reply fit to show as a sample of the voice
_STYLE_WORDS = re.compile(
    r"\b(prefer\w*|like[sd]?|likes? (?:answers|replies)|call (?:me|them|him|her)|address\w*|"
    r"tone|brief|short|concise|detailed|formal|informal|casual|language|speak\w*|spoken|"
    r"emoji\w*|answers?|replies|style|never|don'?t)\b",
    re.IGNORECASE,
)
_OPEN_HEADINGS = re.compile(r"open|next|todo|to do|pending|unfinished|promise", re.IGNORECASE)
_USER_FIELD = re.compile(r"^\s*[-*]\s*\*\*(?P<name>[^*]+?):?\*\*:?\s*(?P<value>.*)$")


def model_id(provider: str, model: str) -> str:
    """``provider:model``; the offline model is just ``offline``."""
    return "offline" if provider == "offline" else f"{provider}:{model}"


def same_model(a: str, b: str) -> bool:
    """True for one model: equal ids, or one a dated name of the other (what the API returns)."""
    if a == b:
        return True
    pa, _, ma = a.partition(":")
    pb, _, mb = b.partition(":")
    return pa == pb and bool(ma) and bool(mb) and (ma.startswith(mb) or mb.startswith(ma))


@dataclass(frozen=True, kw_only=True)
class Part:
    """One part of the letter: a titled memory block."""

    key: str
    title: str
    text: str
    origin: str = "agent"


@dataclass(frozen=True, kw_only=True)
class Letter:
    """The letter: its parts, in order (the voice last, so a cut drops it first)."""

    parts: list[Part]

    def text(self) -> str:
        """The letter as a person reads it (`reverie handover --preview`)."""
        out = [HEADING, PREAMBLE]
        out += [f"### {p.title}\n{p.text}" for p in self.parts]
        return "\n\n".join(out)

    def layer(self) -> Layer:
        layer = Layer(name="handover", heading=HEADING, preamble=PREAMBLE, stable=False)
        for rank, p in enumerate(self.parts):
            layer.entries.append(
                memory_block(
                    f"handover:{p.key}",
                    p.text,
                    kind="handover",
                    origin=p.origin,
                    title=p.title,
                    source="handover letter",
                    rank=rank,
                )
            )
        return layer


class OpenThreads(Protocol):
    async def open_threads(self) -> Sequence[Any]: ...


# -- the letter ----------------------------------------------------------------------------


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def _who(home: Home) -> str:
    """The opening of SOUL.md (after its heading): who the agent is, in its own words."""
    path = home.persona_dir / "SOUL.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    body = [p for p in _paragraphs(text) if not p.startswith("#")]
    return clip(body[0], 420) if body else ""


def _user_lines(home: Home) -> list[str]:
    """USER.md's filled lines: `- **Name:** Sam` with a value, or plain sentences."""
    try:
        text = (home.persona_dir / "USER.md").read_text(encoding="utf-8")
    except OSError:
        return []
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "(", "<!--")):
            continue
        m = _USER_FIELD.match(line)
        if m:
            name = re.sub(r"\s*\(.*?\)", "", m["name"]).strip()
            if m["value"].strip():
                lines.append(f"{name}: {m['value'].strip()}")
            continue
        lines.append(line.lstrip("-* ").strip())
    return [ln for ln in lines if ln]


def _open_wake_items(home: Home, limit: int = 5) -> list[str]:
    """The bullet items under WAKE.md's headings about what is open or next."""
    try:
        text = home.wake_file.read_text(encoding="utf-8")
    except OSError:
        return []
    items: list[str] = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            inside = bool(_OPEN_HEADINGS.search(line))
            continue
        if inside and line.startswith(("-", "*")) and line.lstrip("-* ").strip():
            items.append(clip(line.lstrip("-* ").strip(), 200))
    return items[:limit]


async def voice_samples(
    db: Database, *, prefer: str, limit: int = VOICE_EXAMPLES
) -> list[tuple[str, str]]:
    """A few short replies of its own from past trunk sessions: (when, text), newest first.

    Not tool chatter (replies with code or tool output), not the offline model's words when a
    real model's exist; replies of the model `prefer` (the one handing over) come first, at
    most one per session, so the samples span conversations.
    """
    repo = RepliesRepo(db)
    replies = await repo.trunk_replies(400)
    turns = sorted({r.turn_id for r in replies if r.turn_id})
    models = {t.turn_id: model_id(t.provider, t.model) for t in await repo.trunk_models(turns)}
    fit: list[tuple[str, str, str, str]] = []
    for reply in replies:
        text = " ".join(reply.content.split())
        if not VOICE_MIN <= len(text) <= VOICE_MAX or "```" in text:
            continue
        if text.startswith(("The ", "I found nothing")) and " tool " in text[:60]:
            continue
        model = models.get(reply.turn_id, "") if reply.turn_id else ""
        fit.append((text, reply.ts, model, reply.session_id))
    if any(m and m != "offline" for _, _, m, _ in fit):
        fit = [f for f in fit if f[2] != "offline"]
    fit.sort(key=lambda f: not same_model(f[2], prefer) if f[2] else True)  # stable: newest kept
    chosen: list[tuple[str, str]] = []
    sessions: set[str] = set()
    for text, ts, _, session in fit:
        if session in sessions:
            continue
        sessions.add(session)
        chosen.append((ts[:10], text))
        if len(chosen) == limit:
            break
    return chosen


async def build_letter(
    *,
    from_model: str,
    to_model: str,
    until: datetime | None,
    home: Home,
    db: Database,
    settings: Settings,
    view: MemoryView | None,
    threads: OpenThreads | None,
    now: datetime,
) -> Letter:
    """The letter for a switch from `from_model` to `to_model`, from what the home holds now
    (no model call); `until` is when the old model last answered."""
    days = settings.memory.change_note_days
    profile = [change_noted(i, now=now, days=days) for i in await _profile(view)]
    parts = [
        *_self_part(home),
        *_person_parts(home, profile),
        *await _open_part(home, threads),
        *await _changes_part(home, settings, view, profile, now),
        _switch_part(from_model, to_model, until),
        *await _voice_part(db, from_model),
    ]
    return Letter(parts=parts)


def _self_part(home: Home) -> list[Part]:
    """Who the agent is (the opening of SOUL.md), when it says."""
    who = _who(home)
    return [Part(key="self", title="Who you are", text=who)] if who else []


async def _profile(view: MemoryView | None) -> list[MemoryItem]:
    """The top profile facts the agent may vouch for (none when memory cannot be read)."""
    if view is None:
        return []
    try:
        return [i for i in await view.profile_facts(8) if not is_untrusted(i.origin)]
    except Exception as exc:
        log.warning("profile facts unreadable for the handover letter", error=repr(exc))
        return []


def _person_parts(home: Home, profile: list[MemoryItem]) -> list[Part]:
    """Who the person is, and apart from it how they like to be spoken to."""
    person = _user_lines(home)[:8] + [clip(i.text, 200) for i in profile[:6]]
    style = [p for p in person if _STYLE_WORDS.search(p)]
    about = [p for p in person if p not in style]
    parts: list[Part] = []
    if about:
        parts.append(
            Part(key="person", title="Your person", text="\n".join(f"- {p}" for p in about),
                 origin="person")
        )  # fmt: skip
    if style:
        parts.append(
            Part(
                key="style",
                title="How they like to be spoken to",
                text="\n".join(f"- {p}" for p in style[:5]),
                origin="person",
            )
        )
    return parts


async def _open_part(home: Home, threads: OpenThreads | None) -> list[Part]:
    """What is open: the open threads first, then WAKE.md's open items."""
    open_items: list[str] = []
    if threads is not None:
        try:
            for t in list(await threads.open_threads())[:5]:
                due = f" (due {t.due.isoformat()})" if getattr(t, "due", None) else ""
                open_items.append(f"{t.kind}: {clip(t.text, 160)}{due}")
        except Exception as exc:
            log.warning("open threads unreadable for the handover letter", error=repr(exc))
    open_items += _open_wake_items(home)
    if not open_items:
        return []
    return [Part(key="open", title="What is open", text="\n".join(f"- {o}" for o in open_items))]


async def _changes_part(
    home: Home,
    settings: Settings,
    view: MemoryView | None,
    profile: list[MemoryItem],
    now: datetime,
) -> list[Part]:
    """What changed lately: facts that replaced another, then the newest sleep entries."""
    changed: list[str] = []
    if view is not None:
        try:
            recent = await view.recent_facts(20)
        except Exception:
            recent = []
        days = settings.memory.change_note_days
        for item in [*profile, *recent]:
            if is_untrusted(item.origin):
                continue
            noted = change_noted(item, now=now, days=days)
            if noted.text != item.text or "(changed from" in item.text:
                line = clip(noted.text, 200)
                if line not in changed:
                    changed.append(line)
    changed += _sleep_lines(home, settings, now)
    if not changed:
        return []
    return [
        Part(
            key="changes",
            title="What changed lately",
            text="\n".join(f"- {c}" for c in changed[:6]),
        )
    ]


def _switch_part(from_model: str, to_model: str, until: datetime | None) -> Part:
    """The switch itself: from which model, since when, to which."""
    last = until.date().isoformat() if until else "your last turn"
    return Part(
        key="switch",
        title="The switch",
        text=(
            f"You were running on {from_model} until {last}; "
            f"from now on you run on {to_model}. The memory, the person and the "
            "work are the same: pick up where you left off."
        ),
    )


async def _voice_part(db: Database, from_model: str) -> list[Part]:
    """A few of its own past replies (last: a cut to the layer's budget drops it first)."""
    samples = await voice_samples(db, prefer=from_model)
    if not samples:
        return []
    return [
        Part(
            key="voice",
            title="How you have sounded (your own past replies)",
            text="\n".join(f"- ({day}) “{text}”" for day, text in samples),
        )
    ]


def _sleep_lines(home: Home, settings: Settings, now: datetime) -> list[str]:
    """The newest sleep entries of the journal (what the last nights changed), up to three."""
    from daemon.journal.entries import JournalStore
    from daemon.scheduler import local_zone

    try:
        store = JournalStore(home.journal_dir, local_zone(settings.scheduler.timezone))
        entries = store.tail(60)
    except Exception:
        return []
    cutoff = now - timedelta(days=settings.memory.change_note_days)
    out = [
        clip(e.summary, 200)
        for e in reversed(entries)
        if "sleep" in e.tags and e.ts >= cutoff and e.summary
    ]
    return out[:3]
