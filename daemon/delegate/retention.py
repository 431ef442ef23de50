"""Fork retention: old fork transcripts are archived (gzip) or pruned, by age and total size.

The sleep cycle's maintenance phase calls `apply_fork_retention`; it returns one line saying
what it changed. Only forks that have ended are touched, oldest first; a fork's lineage row
and its summary always stay (the row records where the transcript went). An archived
transcript is written (atomically, fsynced) before the live one is removed, so a crash in
between leaves both, never neither.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import anyio

from daemon.clock import Clock
from daemon.delegate.lineage import ForkLineage, ForkRow, ForkStatus
from daemon.durable import write_atomic
from daemon.log import get_logger
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database

log = get_logger("delegate.retention")

_MB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class _Live:
    row: ForkRow
    path: Path
    size: int
    ended: datetime


def _archive(path: Path, target: Path) -> None:
    write_atomic(target, gzip.compress(path.read_bytes()), mode=0o600)
    path.unlink()


def _ended(row: ForkRow) -> datetime:
    return datetime.fromisoformat(row.ended_at or row.started_at)


async def apply_fork_retention(home: Home, db: Database, settings: Settings, clock: Clock) -> str:
    """Archive or prune ended forks' transcripts older than `max_age_days`, then the oldest
    while the live ones exceed `max_total_mb`; return one line saying what changed.

    Cancellation between two forks leaves the rest for the next run; each fork is handled
    whole (archive written before the live file is removed).
    """
    policy = settings.delegate.retention
    lineage = ForkLineage(db)
    live: list[_Live] = []
    for row in await lineage.all():
        if row.status == ForkStatus.RUNNING or row.retained is not None:
            continue
        path = Path(row.transcript_path)
        if path.parent != home.forks_dir or not await anyio.Path(path).exists():
            continue
        size = (await anyio.Path(path).stat()).st_size
        live.append(_Live(row=row, path=path, size=size, ended=_ended(row)))
    live.sort(key=lambda item: (item.ended, item.row.id))
    total = sum(item.size for item in live)
    now = clock.now()
    chosen: list[_Live] = []
    if policy.max_age_days > 0:
        cutoff = now - timedelta(days=policy.max_age_days)
        chosen = [item for item in live if item.ended < cutoff]
    remaining = total - sum(item.size for item in chosen)
    if policy.max_total_mb > 0:
        limit = int(policy.max_total_mb * _MB)
        for item in live:
            if remaining <= limit:
                break
            if item not in chosen:
                chosen.append(item)
                remaining -= item.size
    freed = 0
    for item in chosen:
        if policy.action == "archive":
            target = home.forks_dir / "archive" / f"{item.path.name}.gz"
            await anyio.to_thread.run_sync(_archive, item.path, target)
            await lineage.mark_retained(item.row.id, "archived", str(target))
        else:
            await anyio.Path(item.path).unlink(missing_ok=True)
            await lineage.mark_retained(item.row.id, "pruned", str(item.path))
        freed += item.size
    verb = "archived" if policy.action == "archive" else "pruned"
    kept = len(live) - len(chosen)
    line = (
        f"fork retention: {verb} {len(chosen)} fork transcript(s) ({freed / _MB:.2f} MB); "
        f"{kept} live ({(total - freed) / _MB:.2f} MB, limits {policy.max_age_days:g} days / {policy.max_total_mb:g} MB)"
        if chosen
        else f"fork retention: nothing to do; {kept} live ({total / _MB:.2f} MB, limits {policy.max_age_days:g} days / {policy.max_total_mb:g} MB)"
    )
    log.info(
        "fork retention applied",
        action=policy.action,
        changed=len(chosen),
        freed_bytes=freed,
        live=kept,
    )
    return line
