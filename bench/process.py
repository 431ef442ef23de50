"""What the idle and latency benches read of a running daemon from outside it.

`cpu_seconds(pid)`: user + system CPU time of a process so far, from `/proc/PID/stat`;
`model_calls(home)`: the rows of a home's usage ledger (one per model call), read-only, so a
bench can say a daemon made no model call while it sat idle.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model_calls(home: Path) -> int:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM usage_ledger").fetchone()[0])
    finally:
        conn.close()
