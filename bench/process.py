"""What the idle and latency benches read of a running daemon from outside it.

`cpu_seconds(pid)`: user + system CPU time of a process so far, from `/proc/PID/stat`;
`model_calls(home)`: the rows of a home's usage ledger (one per model call), read-only, so a
bench can say a daemon made no model call while it sat idle.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model_calls(home: Path) -> int:
    """The ledger's model calls, read through the store's repository on a read-only handle."""
    return anyio.run(_model_calls, home / "reverie.db")


async def _model_calls(db_file: Path) -> int:
    from daemon.store.db import Database
    from daemon.store.usage import UsageRepo

    async with await Database.open(db_file, readonly=True) as db:
        return await UsageRepo(db).calls()
