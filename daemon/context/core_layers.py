"""The prompt's core layers read from the home's files: the persona, the person's profile,
and the wake-up notes with the pinned facts (`FACTS.md`).

Each builder reads through the assembler's `FileCache` (a file that turns unreadable keeps its
last good text, with a note) and returns one `Layer`. Untrusted memory never enters the
profile; `FACTS.md` speaks for the person only outside its generated block.
"""

from __future__ import annotations

from datetime import UTC, datetime

from daemon.context.layers import Entry, Layer, file_entry, is_untrusted, memory_block, memory_entry
from daemon.memory.api import MemoryItem
from daemon.memory.pins import CONFIRMED, split_facts_file
from daemon.paths import Home
from daemon.topics.files import FileCache

PERSONA_NAMES = ("SOUL.md", "STYLE.md", "REGISTER.md")


def persona_layer(files: FileCache, home: Home, notes: list[str], *, neurology: bool) -> Layer:
    """The persona files in order (with `NEUROLOGY.md` when `neurology`); never cut."""
    names = [*PERSONA_NAMES, *(("NEUROLOGY.md",) if neurology else ())]
    entries: list[Entry] = []
    for i, name in enumerate(names):
        ft = files.read(home.persona_dir / name)
        if ft.problem:
            notes.append(f"persona: {ft.problem}")
        if ft.present:
            entries.append(Entry(key=f"persona/{name}", body=ft.text.strip(), rank=i))
    if not entries:
        notes.append("persona: no persona files found; the agent runs without a persona")
    return Layer(name="persona", entries=entries, truncatable=False)


def profile_layer(files: FileCache, home: Home, items: list[MemoryItem], notes: list[str]) -> Layer:
    """`persona/USER.md`, then the profile facts of trusted origins."""
    entries: list[Entry] = []
    user = files.read(home.persona_dir / "USER.md")
    if user.problem:
        notes.append(f"profile: {user.problem}")
    if user.present:
        entries.append(
            file_entry(
                "persona/USER.md", user.text, origin="person", source="persona/USER.md", rank=0
            )
        )
    for item in items:
        if is_untrusted(item.origin):
            notes.append(
                f"profile: left out {item.id}: origin '{item.origin}' is untrusted and never enters the profile"
            )
            continue
        entries.append(memory_entry(item, rank=len(entries)))
    return Layer(name="profile", heading="## About your person", entries=entries)


def wake_layer(files: FileCache, home: Home, notes: list[str]) -> Layer:
    """`WAKE.md`, then `FACTS.md` (the person's own text and each pinned fact)."""
    entries: list[Entry] = []
    wake = files.read(home.wake_file)
    if wake.problem:
        notes.append(f"wake: {wake.problem}")
    if wake.present:
        entries.append(file_entry("WAKE.md", wake.text, origin="agent", source="WAKE.md", rank=0))
    facts = files.read(home.facts_file)
    if facts.problem:
        notes.append(f"wake: {facts.problem}")
    if facts.present:
        entries.extend(pinned_entries(facts.text, rank=len(entries)))
    return Layer(name="wake", heading="## Wake-up notes and pinned facts", entries=entries)


def pinned_entries(text: str, *, rank: int) -> list[Entry]:
    """`FACTS.md` as blocks: the person's own text, then each pinned fact with its origin."""
    parts = split_facts_file(text)
    entries: list[Entry] = []
    if parts.own:
        entries.append(
            file_entry("FACTS.md", parts.own, origin="person", source="FACTS.md", rank=rank)
        )
    for line in parts.pinned:
        confirmed = line.why.startswith(CONFIRMED)
        entries.append(
            memory_block(
                f"FACTS.md:{line.id}",
                line.text,
                id=line.id,
                kind="pinned",
                origin=line.origin,
                ts=datetime(line.day.year, line.day.month, line.day.day, tzinfo=UTC),
                source="FACTS.md",
                title=CONFIRMED if confirmed else "pinned by sleep: the person's own fact",
                rank=rank + len(entries),
            )
        )
    if parts.unvouched:
        # Edited inside the generated block: whose word it is cannot be told, so not theirs.
        entries.append(
            memory_block(
                "FACTS.md:unvouched",
                parts.unvouched,
                origin="agent",
                source="FACTS.md",
                title="edited inside the generated block",
                rank=rank + len(entries),
            )
        )
    return entries
