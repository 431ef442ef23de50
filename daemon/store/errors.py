"""Which failures mean the home's storage refuses writes: a full disk, a quota, a read-only mount,
a PostgreSQL server that is away.

Such a failure is nobody's bug and passes once space is back, so the daemon keeps what it has
and waits instead of failing the work (or dying). The same condition reaches us as an `OSError`
from a file write and as a `sqlite3` error, so both are recognised here, in one place.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# errno values of "no room" or "no writing" (ENOSPC: no space; EDQUOT: over quota; EROFS:
# read-only filesystem; EFBIG: file too large for the filesystem or its limit).
_OS_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}
# SQLite's primary result codes: SQLITE_READONLY (8), SQLITE_IOERR (10), SQLITE_FULL (13).
_SQLITE_CODES = {8: "read-only", 10: "I/O error", 13: "disk full"}


def is_database_error(exc: BaseException) -> bool:
    """Whether `exc` comes from SQLite."""
    import sqlite3

    return isinstance(exc, sqlite3.Error)


def store_server_away(exc: BaseException) -> str | None:
    """Why `exc` means the PostgreSQL server cannot be reached (for a person), else None."""
    if isinstance(exc, BaseExceptionGroup):
        reasons = [store_server_away(e) for e in exc.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    from daemon.store.postgres import StorageUnavailable

    return str(exc).strip() if isinstance(exc, StorageUnavailable) else None


def storage_failure(exc: BaseException) -> str | None:
    """Say why `exc` means storage refuses writes (for a person to read), else None.

    An exception group counts when every exception in it does (a task group that met the
    same full disk in two writers); one unrelated error in it makes it not ours.
    """
    if isinstance(exc, BaseExceptionGroup):
        reasons = [storage_failure(e) for e in exc.exceptions]
        return reasons[0] if reasons and all(reasons) else None
    if isinstance(exc, OSError) and exc.errno in _OS_ERRNOS:
        return exc.strerror or str(exc)
    from daemon.store.postgres import StorageUnavailable

    if isinstance(exc, StorageUnavailable):
        # The PostgreSQL server is away: like a full disk, nobody's bug, and it passes.
        return str(exc)
    if is_database_error(exc):
        # The error carries SQLite's own result code; the extended codes keep it in the low byte.
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_CODES:
            return f"the database cannot write ({_SQLITE_CODES[code & 0xFF]}: {exc})"
    return None


@contextmanager
def unless_storage_refuses(log: Any, event: str, **fields: Any) -> Iterator[None]:
    """Run a write that can be done without: storage refusing it is logged, not raised.

    For notes an index or a log keeps beside the truth (a session's end time, a turn report),
    so a full disk costs the note, never the turn or the shutdown. Anything else propagates.
    """
    try:
        yield
    except Exception as exc:
        if storage_failure(exc) is None:
            raise
        log.warning(event, error=repr(exc), **fields)


def free_bytes(path: Path) -> int | None:
    """Bytes free to an unprivileged writer on the filesystem holding `path` (None: unknown)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None
