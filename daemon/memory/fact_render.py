"""`MEMORY.md` and `PROFILE.md`: the fact log rendered for the person to read.

Both are generated from the log (never edited by hand: the next write overwrites them) and
replaced atomically, so a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import tzinfo
from pathlib import Path

import anyio

from daemon.durable import write_atomic
from daemon.memory.fact_log import Fact
from daemon.memory.fact_views import FactView


class FactRenderings:
    """Write MEMORY.md (the running log) and PROFILE.md (about the person) from the facts."""

    def __init__(self, view: FactView, memory_dir: Path, tz: tzinfo) -> None:
        self.view = view
        self.memory_md = memory_dir / "MEMORY.md"
        self.profile_md = memory_dir / "PROFILE.md"
        self.tz = tz
        self._deferred = 0  # inside `rendering_once`: the files are written at its end

    @asynccontextmanager
    async def rendering_once(self) -> AsyncIterator[None]:
        """Write MEMORY.md and PROFILE.md once, at the end, for the facts stored inside.

        A night reading a backlog stores hundreds of facts; rendering both files (atomic,
        fsynced) after each grew with the facts and was most of the night. The log and the
        index are written fact by fact as ever; the renderings follow at the end, also when
        cancelled (shielded), so they are never left behind the log.
        """
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
            if not self._deferred:
                with anyio.CancelScope(shield=True):
                    await self.render()

    async def render(self) -> None:
        """Regenerate MEMORY.md and PROFILE.md from the log (atomic replace)."""
        if self._deferred:
            return  # `rendering_once` writes them at its end
        memory = self.text(
            "Memory",
            "The running log of explicit facts, oldest first.",
            self.view.facts(target="memory"),
        )
        profile = self.text(
            "Profile",
            "Stable facts about the person (the content of USER.md's profile).",
            self.view.facts(target="profile"),
        )

        def write() -> None:
            for path, text in ((self.memory_md, memory), (self.profile_md, profile)):
                write_atomic(path, text)

        await anyio.to_thread.run_sync(write)

    def missing(self) -> bool:
        """True when either file is not there (a new home, or deleted by hand)."""
        return not self.memory_md.exists() or not self.profile_md.exists()

    def text(self, title: str, blurb: str, facts: list[Fact]) -> str:
        """One rendering: a line per fact with its id, day, origin, tags, provenance, pin."""
        lines = [
            f"# {title}",
            "",
            f"{blurb} Generated from `facts.jsonl`; edits here are overwritten —",
            "use `reverie remember` (`--correct ID`, `--retract ID`) instead.",
            "",
        ]
        if not facts:
            lines.append("(nothing yet)")
        for fact in facts:
            day = fact.created_at.astimezone(self.tz).date().isoformat()
            extra = f"; tags: {', '.join(fact.tags)}" if fact.tags else ""
            if fact.mined:
                extra = f"; mined from {fact.session or 'a session'}" + extra
            fix = f"; corrects {fact.supersedes}" if fact.supersedes else ""
            pin = ""
            if fact.pin_confirmed_at is not None:
                pin = "; you confirmed pinning it"
            elif fact.pin_proposed_at is not None:
                pin = f"; proposed for pinning — confirm: reverie remember --pin {fact.id}"
            lines.append(f"- [{fact.id}] {day} — {fact.text} _({fact.origin}{extra}{fix}{pin})_")
        return "\n".join(lines) + "\n"
