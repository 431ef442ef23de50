"""The Sleep & dreams page: each cycle's phases, durations and change set; WAKE.md; dream
revisions as diffs, and their revert.

A cycle is `reverie sleep show`'s (`cycle_view`), a revision `reverie dreams show`'s, and a
revert `reverie dreams revert`'s (`RevisionStore.revert`: the previous version of each file
written back, the revision marked reverted; the daemon's topic watcher reloads the topic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from daemon.sleep.changes import cycle_view
from daemon.sleep.checkpoints import Checkpoints
from daemon.sleep.revisions import Revision, RevisionError, RevisionStore

if TYPE_CHECKING:
    from daemon.services import Services


@dataclass(frozen=True, kw_only=True)
class DiffLine:
    kind: str  # file | hunk | add | del | same
    text: str


def diff_lines(diff: str) -> list[DiffLine]:
    """A unified diff as lines a template can colour."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("--- ", "+++ ")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append(DiffLine(kind=kind, text=line))
    return out


async def cycles(services: Services, *, limit: int = 10) -> list[dict[str, Any]]:
    """The last `limit` cycles, newest first, as `reverie sleep show` reads each."""
    out = []
    for record in await Checkpoints(services.db).cycles(limit=limit):
        view = await cycle_view(services.db, services.home, record.id)
        if view is not None:
            out.append(view)
    return out


async def revisions(services: Services, *, limit: int = 30) -> list[dict[str, Any]]:
    """The newest dream revisions with their diffs as lines."""
    recent = await RevisionStore(services.home, services.db).recent(limit=limit)
    return [_revision(r) for r in recent]


def _revision(rev: Revision) -> dict[str, Any]:
    return {**rev.to_json(), "lines": diff_lines(rev.diff)}


async def wake_notes(services: Services) -> str | None:
    """WAKE.md as it is now (None when there is none yet)."""
    path = services.home.wake_file

    def read() -> str | None:
        return path.read_text(encoding="utf-8") if path.exists() else None

    return await anyio.to_thread.run_sync(read)


async def revert(services: Services, rev_id: str) -> str:
    """Revert a dream revision; the message to show. Raises `RevisionError` when it cannot."""
    rev_id = rev_id.strip()
    if not rev_id:
        raise RevisionError("which revision? the form named none")
    rev = await RevisionStore(services.home, services.db).revert(rev_id, now=services.clock.now())
    paths = ", ".join(f.path for f in rev.files)
    return f"reverted {rev.id}: {paths} restored to the version before the dream"
