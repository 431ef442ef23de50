"""`DreamRevisionsRepo` (daemon/store/dream_revisions.py): the dreams' revisions to the topic
files — one contract, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from daemon.store.dream_revisions import (
    DreamRevisionsRepo,
    FileChange,
    Revision,
    RevisionStatus,
)
from tests.postgres_server import pg_server  # noqa: F401
from tests.test_store_repos import Store, store  # noqa: F401


def revision(rid: str, cycle: str, created: str, **kw: object) -> Revision:
    fields: dict[str, object] = {
        "id": rid,
        "cycle_id": cycle,
        "created_at": created,
        "kind": "addendum",
        "target": "cooking",
        "status": RevisionStatus.APPLIED,
        "reason": "the person cooks on Sundays",
        "files": (FileChange(path="topics/cooking.md", before="old\n", after="new 100%\n"),),
        "diff": "--- a\n+++ b\n-old\n+new 100%\n",
        "sources": ("fact:f-1", "summary:s-1"),
    }
    fields.update(kw)
    return Revision(**fields)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_revisions_are_kept_once_and_read_back_whole(store: Store) -> None:  # noqa: F811
    async with store.open("dream_revisions") as db:
        repo = DreamRevisionsRepo(db)
        assert await repo.get("d-1") is None and await repo.recent(10) == []
        first = revision("d-b", "c1", "2026-03-02T03:00:00+00:00")
        await repo.add(first)
        # Kept once: a second record under the same id changes nothing.
        await repo.add(revision("d-b", "c1", "2026-03-02T03:00:00+00:00", reason="other"))
        new_topic = revision(
            "d-a",
            "c1",
            "2026-03-02T03:00:00+00:00",
            kind="new_topic",
            target="garden",
            files=(FileChange(path="topics/garden.md", before=None, after="roses\n"),),
            sources=(),
        )
        await repo.add(new_topic)
        rejected = revision(
            "d-c", "c2", "2026-03-03T03:00:00+00:00", status=RevisionStatus.REJECTED
        )
        await repo.add(rejected)

        assert await repo.get("d-b") == first
        assert await repo.get("d-a") == new_topic
        # A cycle's in the order recorded; recent newest first, then by id.
        assert [r.id for r in await repo.of_cycle("c1")] == ["d-b", "d-a"]
        assert [r.id for r in await repo.recent(10)] == ["d-c", "d-b", "d-a"]
        assert [r.id for r in await repo.recent(1)] == ["d-c"]
        assert await repo.of_cycle("c9") == []


@pytest.mark.anyio
async def test_only_an_applied_revision_is_marked_reverted(store: Store) -> None:  # noqa: F811
    async with store.open("dream_revisions") as db:
        repo = DreamRevisionsRepo(db)
        await repo.add(revision("d-1", "c1", "2026-03-02T03:00:00+00:00"))
        await repo.add(
            revision("d-2", "c1", "2026-03-02T03:00:00+00:00", status=RevisionStatus.REJECTED)
        )
        at = "2026-03-02T09:00:00+00:00"
        await repo.mark_reverted("d-1", at)
        await repo.mark_reverted("d-2", at)
        got = await repo.get("d-1")
        assert got is not None and (got.status, got.reverted_at) == (RevisionStatus.REVERTED, at)
        await repo.mark_reverted("d-1", "2026-03-04T00:00:00+00:00")  # once only
        again = await repo.get("d-1")
        assert again is not None and again.reverted_at == at
        left = await repo.get("d-2")
        assert left is not None and (left.status, left.reverted_at) == ("rejected", None)
