"""The journal heartbeat: structured entries of long-running work, a daily digest, redaction.

`JournalHeartbeat` writes the entries (see `heartbeat`); `latest_digest(home)` is what the
context's journal layer and the sleep cycle's wake-up read. The names are looked up when first
used: a cold command that reads entries (`daemon.journal.entries`) does not load the heartbeat
and the search index behind it.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "latest_digest": "daemon.journal.digest",
    "JournalEntry": "daemon.journal.entries",
    "JournalStore": "daemon.journal.entries",
    "JournalHeartbeat": "daemon.journal.heartbeat",
}

__all__ = ["JournalEntry", "JournalHeartbeat", "JournalStore", "latest_digest"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'daemon.journal' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
