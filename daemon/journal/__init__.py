"""The journal heartbeat: structured entries of long-running work, a daily digest, redaction.

`JournalHeartbeat` writes the entries (see `heartbeat`); `latest_digest(home)` is what the
context's journal layer and the sleep cycle's wake-up read.
"""

from daemon.journal.digest import latest_digest
from daemon.journal.entries import JournalEntry, JournalStore
from daemon.journal.heartbeat import JournalHeartbeat

__all__ = ["JournalEntry", "JournalHeartbeat", "JournalStore", "latest_digest"]
