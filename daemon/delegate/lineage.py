"""Fork lineage: one row per fork session (parent, depth, task, status, times) in `forks`.

The row is written *before* the fork's transcript exists and finished after it ends, so a
row still `running` at start-up is a fork the daemon died in the middle of: `recover()`
marks it failed and leaves it unreported until its parent's turn asks again (`delegate`
then returns the failure instead of a silent retry). The rows are read and written through
`daemon.store.forks`.
"""

from __future__ import annotations

import enum
import gzip
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from daemon.durable import parse_jsonl
from daemon.records import ForkEnd, SessionStart, parse_record
from daemon.store.db import Database
from daemon.store.forks import ForkRow, ForksRepo

# Why a row rebuilt from a transcript without a `fork_end` record says it ended.
NO_END_RECORDED = "its transcript records no end (the daemon stopped while it ran)"


# How a fork ended. `complete`: it called task_complete; `incomplete`: it stopped answering
# without it; `stopped`: a limit (inactivity, tree ceiling, token budget) ended it; `cancelled`:
# its parent's turn was cancelled; `failed`: an error, or the daemon stopped while it ran.
class ForkStatus(enum.StrEnum):
    """Where a fork stands: running, or how it ended (the `forks.status` column and `fork_end`)."""

    RUNNING = "running"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    STOPPED = "stopped"
    CANCELLED = "cancelled"
    FAILED = "failed"
    VETOED = "vetoed"


_STATUSES = frozenset(s.value for s in ForkStatus)


class ForkLineage:
    """The fork lineage over the `forks` repository (`daemon.store.forks`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.repo = ForksRepo(db)

    async def start(
        self,
        *,
        fork_id: str,
        parent_session_id: str,
        parent_turn_id: str,
        parent_call_id: str | None,
        root_session_id: str,
        depth: int,
        task: str,
        transcript_path: str,
        started_at: datetime,
        status: ForkStatus = ForkStatus.RUNNING,
    ) -> None:
        await self.repo.add(
            fork_id=fork_id,
            parent_session_id=parent_session_id,
            parent_turn_id=parent_turn_id,
            parent_call_id=parent_call_id,
            root_session_id=root_session_id,
            depth=depth,
            task=task,
            status=status,
            transcript_path=transcript_path,
            started_at=started_at.isoformat(),
        )

    async def finish(
        self,
        fork_id: str,
        *,
        status: ForkStatus,
        ended_at: datetime,
        outcome: str | None = None,
        summary: str | None = None,
        stop_reason: str | None = None,
        tokens: int = 0,
    ) -> None:
        if status not in _STATUSES:
            raise ValueError(f"unknown fork status {status!r}; expected one of {sorted(_STATUSES)}")
        await self.repo.finish(
            fork_id,
            status=status,
            ended_at=ended_at.isoformat(),
            outcome=outcome,
            summary=summary,
            stop_reason=stop_reason,
            tokens=tokens,
        )

    async def get(self, fork_id: str) -> ForkRow | None:
        return await self.repo.get(fork_id)

    async def all(self) -> list[ForkRow]:
        return await self.repo.all()

    async def running(self) -> list[ForkRow]:
        return await self.repo.with_status(ForkStatus.RUNNING)

    async def recover(self, *, now: datetime, reason: str) -> list[ForkRow]:
        """Mark every fork still `running` failed and unreported; return them as they were."""
        rows = await self.running()
        for row in rows:
            await self.repo.fail_unreported(row.id, reason=reason, at=now.isoformat())
        return rows

    async def unreported(self, parent_session_id: str, parent_turn_id: str) -> list[ForkRow]:
        """Forks of this parent turn that a restart ended and nobody has told the parent about."""
        return await self.repo.unreported(parent_session_id, parent_turn_id)

    async def mark_reported(self, fork_ids: list[str]) -> None:
        await self.repo.mark_reported(fork_ids)

    async def mark_retained(self, fork_id: str, how: str, transcript_path: str) -> None:
        await self.repo.mark_retained(fork_id, how, transcript_path)

    async def count_running(self) -> int:
        return await self.repo.count_with_status(ForkStatus.RUNNING)

    async def rebuild(self, forks_dir: Path) -> int:
        """Restore the rows a rebuilt database lacks from the fork transcripts; return how many.

        Live transcripts (`*.jsonl`) and archived ones (`archive/*.jsonl.gz`) are read; a pruned
        fork has no transcript left and no row comes back. Rows already present are kept.
        """

        def read() -> list[ForkRow]:
            rows = (row_from_transcript(p) for p in fork_transcripts(forks_dir))
            return [ForkRow.from_db(row) for row in rows if row is not None]

        return await self.repo.add_missing(await anyio.to_thread.run_sync(read))


def fork_transcripts(forks_dir: Path) -> list[Path]:
    """Live (`*.jsonl`) and archived (`archive/*.jsonl.gz`) fork transcripts, in a stable order."""
    return sorted(forks_dir.glob("*.jsonl")) + sorted(forks_dir.glob("archive/*.jsonl.gz"))


def _records(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    return parse_jsonl(gzip.decompress(raw) if path.suffix == ".gz" else raw, path)


def row_from_transcript(path: Path) -> tuple[Any, ...] | None:
    """The `forks` row (in the column order of `ForkRow`) a fork transcript describes, or None.

    The header line names the fork, its parent, root, depth and task; the `fork_end` record
    written when it ended gives status, outcome, summary and tokens. A transcript without
    one is a fork the daemon stopped in the middle of: failed, as `recover` would mark it.
    """
    try:
        records = _records(path)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    head = parse_record(records[0]) if records else None
    if not isinstance(head, SessionStart) or head.kind != "fork" or not head.id:
        return None
    end = next((e for r in reversed(records) if isinstance(e := parse_record(r), ForkEnd)), None)
    extra = head.extra
    parent = head.parent or ""
    return (
        head.id,
        parent,
        str(extra.get("parent_turn") or ""),
        extra.get("parent_call"),
        str(extra.get("root") or parent),
        int(extra.get("depth") or 1),
        str(extra.get("task") or ""),
        (end.status or ForkStatus.FAILED) if end else ForkStatus.FAILED,
        end.outcome if end else None,
        end.summary if end else None,
        end.reason if end else NO_END_RECORDED,
        end.tokens if end else 0,
        str(path),
        str(extra.get("forked_at") or head.started_at or ""),
        (end.ts or None) if end else None,
        1,  # history: nobody is waiting to be told
        "archived" if path.suffix == ".gz" else None,
    )
