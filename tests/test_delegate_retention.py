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
