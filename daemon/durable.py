"""Durable writes, in one place: whole-line appends and atomic replacements, both fsynced.

Every file Reverie owns is written one of two ways:

- `append_lines(path, lines)`: append whole lines and fsync. A torn previous write (a crash
  mid-append) leaves no newline at the end; the next append starts on a fresh line, and
  `read_jsonl` skips the torn fragment, so a crash never leaves a broken record behind.
- `write_atomic(path, data)`: write a temporary file beside the target, fsync it, rename it
  over the target and fsync the directory, so readers see the old file or the new one,
  never half of either.

All functions block: call them from a worker thread (`anyio.to_thread.run_sync`).

Every fsync here goes through `fsync`, the one call that makes a write durable. A test can
route it through a function of its own with `fsync_through` (which must still sync) to see
that a write was synced before it was acknowledged — a crash test cannot: the page cache
survives a killed process, so a write that was never synced still reads back after a kill.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon.log import get_logger

log = get_logger("durable")

# (file, line number) of unreadable lines already reported: files are append-only, so a torn
# line stays where it is, and a file read on every turn must not warn on every turn.
_REPORTED: set[tuple[str, int]] = set()

_fsync: Callable[[int], None] = os.fsync


def fsync(fd: int) -> None:
    """Flush `fd`'s data to the disk (`os.fsync`, or what `fsync_through` installed)."""
    _fsync(fd)


@contextmanager
def fsync_through(sync: Callable[[int], None]) -> Iterator[None]:
    """Within the block, every fsync of this module is `sync(fd)`; `sync` must call `os.fsync`.

    For tests that count or inspect syncs; not thread-aware beyond the block's extent.
    """
    global _fsync
    before = _fsync
    _fsync = sync
    try:
        yield
    finally:
        _fsync = before


def append_lines(path: Path, lines: Iterable[str], *, mode: int = 0o600) -> None:
    """Append whole lines to `path` (created with `mode`) and fsync."""
    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode()
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, mode)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically (temp file, fsync, rename, directory fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode if mode is not None else 0o644)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
        fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        fsync(fd)
    except OSError:
        pass  # some filesystems refuse a directory fsync; the rename is still atomic
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSONL file, skipping torn or corrupt lines (logged once each); [] when it does not exist."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    return parse_jsonl(raw, path)


def parse_jsonl(raw: bytes, path: Path) -> list[dict[str, Any]]:
    """The objects of JSONL bytes read from `path`, skipping torn or corrupt lines (logged once each)."""
    out: list[dict[str, Any]] = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            if (str(path), n) not in _REPORTED:
                _REPORTED.add((str(path), n))
                log.warning("skipping an unreadable line", path=str(path), line=n)
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
