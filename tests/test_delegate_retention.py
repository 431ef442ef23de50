"""Fork retention: old and oversized fork transcripts archived or pruned; running forks untouched."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from daemon.clock import FakeClock
from daemon.delegate.lineage import ForkLineage
from daemon.delegate.retention import apply_fork_retention
from daemon.durable import append_lines
from daemon.paths import Home
from daemon.settings import DelegateSettings, ForkRetention, Settings
from daemon.store.db import Database

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


async def _fork(
    db: Database,
    home: Home,
    fork_id: str,
    *,
    age_days: float,
    kilobytes: int,
    status: str = "complete",
) -> Path:
    path = home.forks_dir / f"{fork_id}.jsonl"
    line = '{"type":"message","role":"assistant","content":"' + "x" * 1000 + '"}'
    append_lines(path, [line] * kilobytes)
    started = NOW - timedelta(days=age_days)
    lineage = ForkLineage(db)
    await lineage.start(
        fork_id=fork_id,
        parent_session_id="trunk-1",
        parent_turn_id="t1",
        parent_call_id=None,
        root_session_id="trunk-1",
        depth=1,
        task=f"task {fork_id}",
        transcript_path=str(path),
        started_at=started,
    )
    await db.execute(
        "INSERT INTO sessions(id, kind, parent_id, transcript_path, started_at) VALUES (?,?,?,?,?)",
        (fork_id, "fork", "trunk-1", str(path), started.isoformat()),
    )
    if status != "running":
        await lineage.finish(fork_id, status=status, ended_at=started + timedelta(minutes=5))
    return path


def _settings(**retention: object) -> Settings:
    return Settings(delegate=DelegateSettings(retention=ForkRetention(**retention)))  # type: ignore[arg-type]


async def test_archive_by_age_then_by_size_oldest_first(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    async with await Database.open(home.db_file) as db:
        old = await _fork(db, home, "fork-old", age_days=40, kilobytes=50)
        mid = await _fork(db, home, "fork-mid", age_days=10, kilobytes=300)
        new = await _fork(db, home, "fork-new", age_days=1, kilobytes=300)
        busy = await _fork(db, home, "fork-busy", age_days=90, kilobytes=50, status="running")
        original = mid.read_bytes()
        # 0.4 MB allowed: after the old one goes by age, mid and new (≈0.6 MB) are over, so mid goes too.
        line = await apply_fork_retention(
            home, db, _settings(max_age_days=30, max_total_mb=0.4, action="archive"), FakeClock(NOW)
        )
        rows = {r.id: r for r in await ForkLineage(db).all()}
        session_path = (
            await db.fetchone("SELECT transcript_path FROM sessions WHERE id = 'fork-mid'")
        )[0]
        again = await apply_fork_retention(
            home, db, _settings(max_age_days=30, max_total_mb=0.4, action="archive"), FakeClock(NOW)
        )
    assert line.startswith("fork retention: archived 2 fork transcript(s)") and "1 live" in line
    assert not old.exists() and not mid.exists() and new.exists() and busy.exists()
    archived = home.forks_dir / "archive" / "fork-mid.jsonl.gz"
    assert gzip.decompress(archived.read_bytes()) == original
    assert rows["fork-mid"].retained == "archived" and rows["fork-mid"].transcript_path == str(
        archived
    )
    assert session_path == str(archived)
    assert (
        rows["fork-old"].retained == "archived"
        and rows["fork-new"].retained is None
        and rows["fork-busy"].retained is None
    )
    assert again.startswith("fork retention: nothing to do; 1 live")


async def test_prune_deletes_but_keeps_the_lineage(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    async with await Database.open(home.db_file) as db:
        old = await _fork(db, home, "fork-old", age_days=40, kilobytes=5)
        new = await _fork(db, home, "fork-new", age_days=1, kilobytes=5)
        line = await apply_fork_retention(
            home, db, _settings(max_age_days=30, max_total_mb=0, action="prune"), FakeClock(NOW)
        )
        rows = {r.id: r for r in await ForkLineage(db).all()}
    assert line.startswith("fork retention: pruned 1 fork transcript(s)")
    assert not old.exists() and new.exists() and not (home.forks_dir / "archive").exists()
    assert rows["fork-old"].retained == "pruned" and rows["fork-old"].status == "complete"


async def test_a_lost_database_gets_the_lineage_back_from_live_and_archived_transcripts(
    tmp_path: Path,
) -> None:
    """`memory reindex` after the database is gone: a row per fork transcript left on disk."""
    home = Home(tmp_path / "home")
    home.ensure()
    header = (
        '{"type":"session","id":"%s","kind":"fork","started_at":"2026-05-01T10:00:01+00:00",'
        '"parent":"trunk-1","depth":%d,"task":"%s","parent_turn":"t1","parent_call":"c1",'
        '"root":"trunk-1","forked_at":"2026-05-01T10:00:00+00:00"}'
    )
    ended = '{"type":"fork_end","status":"complete","outcome":"success","summary":"done it","reason":null,"tokens":42,"ts":"2026-05-01T10:05:00+00:00"}'
    # A line that is not UTF-8 between the two costs that line, not the fork's row.
    (home.forks_dir / "fork-a.jsonl").write_bytes(
        (header % ("fork-a", 1, "count herons")).encode() + b"\n\xff\xfe\n" + ended.encode() + b"\n"
    )
    # A fork the daemon died in: no end recorded, and a torn last line.
    crashed = home.forks_dir / "fork-b.jsonl"
    append_lines(crashed, [header % ("fork-b", 2, "sub-task")])
    with crashed.open("a") as fh:
        fh.write('{"type":"message","ro')
    archive = home.forks_dir / "archive"
    archive.mkdir()
    with gzip.open(archive / "fork-c.jsonl.gz", "wt") as fh:
        fh.write(header % ("fork-c", 1, "old task") + "\n" + ended + "\n")
    async with await Database.open(home.db_file) as db:
        lineage = ForkLineage(db)
        assert await lineage.rebuild(home.forks_dir) == 3
        assert await lineage.rebuild(home.forks_dir) == 0  # rows already there are kept
        rows = {r.id: r for r in await lineage.all()}
    a, b, c = rows["fork-a"], rows["fork-b"], rows["fork-c"]
    assert (a.status, a.outcome, a.summary, a.tokens, a.depth, a.task) == (
        "complete", "success", "done it", 42, 1, "count herons",
    )  # fmt: skip
    assert (a.parent_session_id, a.parent_turn_id, a.parent_call_id, a.root_session_id) == (
        "trunk-1", "t1", "c1", "trunk-1",
    )  # fmt: skip
    assert a.started_at == "2026-05-01T10:00:00+00:00" and a.retained is None and a.reported
    assert b.status == "failed" and "no end" in (b.stop_reason or "") and b.depth == 2
    assert c.retained == "archived" and c.transcript_path.endswith("fork-c.jsonl.gz")
