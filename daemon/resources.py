"""What the daemon holds of the machine, kept flat for years of uptime.

A daemon that runs for years must not creep: `ResourceWatch` reads the process's resident
memory, open file descriptors and child processes from /proc, and the database and its WAL from
the home, once after start and again after every sleep; `status` shows the figures now beside
those two, with a warning for each that drifts. A sleep is where the day's caches end: after the
wake-up the watch clears the caches registered here (`forgettable`), collects, and hands the
allocator's free pages back to the system (`malloc_trim`), so the next day starts near where the
first one did.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from daemon.clock import Clock
from daemon.log import get_logger

log = get_logger("resources")

# How far a figure may drift before `status` says so.
RSS_AFTER_SLEEP_MB = 20.0  # after a sleep, above the figure after start
RSS_AWAKE_MB = 200.0  # at any time, above the figure after start
FDS_GROWTH = 64  # open descriptors above the figure after start
WAL_MB = 64.0  # the scheduled checkpoint keeps the WAL far below this

_forgettable: list[Callable[[], None]] = []


def forgettable(clear: Callable[[], None]) -> Callable[[], None]:
    """Register a cache's `clear` to be called after every sleep; returns it unchanged."""
    if clear not in _forgettable:
        _forgettable.append(clear)
    return clear


@dataclass(frozen=True, kw_only=True)
class ResourceSample:
    """One reading: resident memory (MB), open descriptors, child processes, store sizes (MB)."""

    at: str
    rss_mb: float
    fds: int
    children: int
    db_mb: float
    wal_mb: float


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def _children() -> int:
    """Direct child processes of every thread of this process (MCP servers, sandboxes)."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            n += len(Path(f"/proc/self/task/{task}/children").read_text().split())
        except OSError:
            continue
    return n


def _mb(path: Path) -> float:
    try:
        return round(path.stat().st_size / 1e6, 2)
    except OSError:
        return 0.0


def _malloc_trim() -> bool:
    """Hand glibc's free heap pages back to the system (False where there is no glibc)."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def release_memory() -> None:
    """Clear the registered caches, collect, and return free heap pages to the system."""
    for clear in _forgettable:
        try:
            clear()
        except Exception as exc:  # a cache that cannot clear is a missed saving, no more
            log.warning("cache clear failed", error=repr(exc))
    gc.collect()
    _malloc_trim()


class ResourceWatch:
    """The daemon's resource figures now, after start and after the last sleep; their drift."""

    def __init__(self, *, db_file: Path | None, clock: Clock) -> None:
        self.db_file = db_file
        self.clock = clock
        self.at_start: ResourceSample | None = None
        self.after_sleep: ResourceSample | None = None
        self._worked = False

    def sample(self) -> ResourceSample:
        wal = Path(f"{self.db_file}-wal") if self.db_file is not None else None
        return ResourceSample(
            at=self.clock.now().isoformat(),
            rss_mb=_rss_mb(),
            fds=_fds(),
            children=_children(),
            db_mb=_mb(self.db_file) if self.db_file is not None else 0.0,
            wal_mb=_mb(wal) if wal is not None else 0.0,
        )

    def started(self) -> ResourceSample:
        """Take the figures the later ones are held to (once the daemon is up)."""
        self.at_start = self.sample()
        return self.at_start

    async def first_turn(self, _event: object = None) -> None:
        """After the first turn, take the start figures again: a first turn loads what only work
        loads (a provider's connection pool and TLS context, the sandbox, the index's caches),
        and holding later figures to a daemon that never worked would call that a drift."""
        if not self._worked:
            self._worked = True
            self.started()

    async def slept(self, _event: object = None) -> None:
        """After a sleep: let go of the day's caches, then take the after-sleep figures.

        A sleep before any turn is a daemon's first work (it loads the tokenizer's vocabulary,
        ~47 MB, and the sleep's own code): its figures become the start figures, as a first
        turn's do, and the first turn takes them again."""
        release_memory()
        self.after_sleep = self.sample()
        if not self._worked:
            self.at_start = self.after_sleep
        start = self.at_start
        log.info(
            "resources after sleep",
            rss_mb=self.after_sleep.rss_mb,
            rss_start_mb=start.rss_mb if start else None,
            fds=self.after_sleep.fds,
            children=self.after_sleep.children,
            wal_mb=self.after_sleep.wal_mb,
        )

    def warnings(self, now: ResourceSample, *, expected_children: int | None) -> list[str]:
        """What drifted; `expected_children` None: work is running, children come and go."""
        out: list[str] = []
        start = self.at_start
        if start is not None:
            if (
                self.after_sleep is not None
                and self.after_sleep.rss_mb - start.rss_mb > RSS_AFTER_SLEEP_MB
            ):
                out.append(
                    f"memory after the last sleep is {self.after_sleep.rss_mb - start.rss_mb:.0f} MB"
                    f" above its start (expected within {RSS_AFTER_SLEEP_MB:.0f})"
                )
            if now.rss_mb - start.rss_mb > RSS_AWAKE_MB:
                out.append(f"memory has grown {now.rss_mb - start.rss_mb:.0f} MB since start")
            if now.fds - start.fds > FDS_GROWTH:
                out.append(f"{now.fds - start.fds} more open files than after start")
        if expected_children is not None and now.children > expected_children:
            out.append(
                f"{now.children} child processes where {expected_children} are expected"
                " (MCP servers and running tools)"
            )
        if now.wal_mb > WAL_MB:
            out.append(
                f"the database's WAL is {now.wal_mb:.0f} MB (checkpoints are not keeping up)"
            )
        return out

    def describe(self, *, expected_children: int | None) -> dict[str, Any]:
        now = self.sample()
        return {
            **asdict(now),
            "at_start": asdict(self.at_start) if self.at_start else None,
            "after_sleep": asdict(self.after_sleep) if self.after_sleep else None,
            "warnings": self.warnings(now, expected_children=expected_children),
        }
