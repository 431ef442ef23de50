"""The dream journal's revisions (`dream_revisions`): one row per change a dream proposed to
the topic files — applied, rejected or reverted — with the files' previous versions.

How a revision is proposed, checked, applied and reverted on disk is `daemon.sleep.revisions`;
this module reads and writes the rows.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


class RevisionStatus(enum.StrEnum):
    """Where a dream revision stands (the strings are what `dream_revisions.status` holds)."""

    APPLIED = "applied"
    REJECTED = "rejected"
    REVERTED = "reverted"


@dataclass(frozen=True, kw_only=True)
class FileChange:
    path: str  # relative to the home
    before: str | None  # None: the file did not exist
    after: str | None  # None: the file is removed

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}


@dataclass(frozen=True, kw_only=True)
class Revision:
    id: str
    cycle_id: str
    created_at: str
    kind: str
    target: str
    status: RevisionStatus
    reason: str
    files: tuple[FileChange, ...]
    diff: str
    sources: tuple[str, ...] = ()
    reverted_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "cycle_id": self.cycle_id, "created_at": self.created_at, "kind": self.kind,
            "target": self.target, "status": self.status, "reason": self.reason,
            "files": [f.path for f in self.files], "diff": self.diff, "sources": list(self.sources),
            "reverted_at": self.reverted_at,
        }  # fmt: skip


def _revision(row: Any) -> Revision:
    files = tuple(
        FileChange(path=f["path"], before=f["before"], after=f["after"])
        for f in json.loads(row["files"])
    )
    return Revision(
        id=row["id"], cycle_id=row["cycle_id"], created_at=row["created_at"], kind=row["kind"],
        target=row["target"], status=RevisionStatus(row["status"]), reason=row["reason"],
        files=files, diff=row["diff"], sources=tuple(json.loads(row["sources"] or "[]")),
        reverted_at=row["reverted_at"],
    )  # fmt: skip


class DreamRevisionsRepo:
    """The `dream_revisions` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, rev_id: str) -> Revision | None:
        row = await self.db.fetchone("SELECT * FROM dream_revisions WHERE id = ?", (rev_id,))
        return _revision(row) if row else None

    async def recent(self, limit: int) -> list[Revision]:
        """The last `limit` revisions, newest first."""
        rows = await self.db.fetchall(
            "SELECT * FROM dream_revisions ORDER BY created_at DESC, id DESC LIMIT ?", (limit,)
        )
        return [_revision(r) for r in rows]

    async def of_cycle(self, cycle_id: str) -> list[Revision]:
        """A cycle's revisions, in the order they were recorded."""
        rows = await self.db.fetchall(
            "SELECT * FROM dream_revisions WHERE cycle_id = ? ORDER BY rowid", (cycle_id,)
        )
        return [_revision(r) for r in rows]

    async def add(self, revision: Revision) -> None:
        """Record a revision (a revision already recorded under its id is kept as it is)."""
        await self.db.execute(
            "INSERT INTO dream_revisions(id, cycle_id, created_at, kind, target, "
            "status, reason, files, diff, sources) VALUES (?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT DO NOTHING",
            (
                revision.id, revision.cycle_id, revision.created_at, revision.kind,
                revision.target, revision.status, revision.reason,
                json.dumps([c.to_json() for c in revision.files]), revision.diff,
                json.dumps(list(revision.sources)),
            ),
        )  # fmt: skip

    async def mark_reverted(self, rev_id: str, at: str) -> None:
        """Mark the revision reverted at `at`, if it is applied (else nothing changes)."""
        await self.db.execute(
            "UPDATE dream_revisions SET status = 'reverted', reverted_at = ? "
            "WHERE id = ? AND status = 'applied'",
            (at, rev_id),
        )
