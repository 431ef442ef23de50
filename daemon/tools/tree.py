"""The workspace as a person sees it in a repository, listed and searched.

Which files a listing or a search sees is decided in one place, `visible_files`:
`.gitignore` files (nested ones too, the deepest rule deciding) are honoured, `.git` is never
shown, symlinks are shown but never followed. The walk goes from directory descriptor to
directory descriptor (`O_NOFOLLOW`), never by path, so a directory swapped for a symlink
mid-walk leads nowhere. The search opens exactly those files itself, the same way, and hands
ripgrep the open descriptors when it is installed (it reads `/proc/self/fd/N`, the very file
that was opened) or reads them in Python otherwise, so both ways find the same lines in the
same order and neither can be sent outside the workspace. Globs use the `.gitignore` syntax.

The walking and the Python search block: call them from a worker thread.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import ByteReceiveStream

from daemon.tools.file_limits import LIST_MAX_ENTRIES as LIST_MAX_ENTRIES
from daemon.tools.file_limits import SEARCH_LINE_CHARS as SEARCH_LINE_CHARS
from daemon.tools.file_limits import SEARCH_MAX_MATCHES as SEARCH_MAX_MATCHES
from daemon.tools.registry import ToolError
from daemon.tools.workspace import Opened, Workspace

if TYPE_CHECKING:
    # Imported where a listing or search first reads a .gitignore or a glob, not when the
    # daemon starts: pathspec with the regex backends it finds (hyperscan, re2) is ~40 modules
    # (~0.01 CPU-seconds).
    from pathspec import GitIgnoreSpec

# Past this many matches a search stops looking: it says "more than", not how many.
_SEARCH_CEILING = SEARCH_MAX_MATCHES * 10
# ripgrep is handed this many open files per run (well under the usual limit of 1024 fds).
_RG_BATCH_FILES = 200
# The Python search reads a line in pieces of at most this many bytes (ripgrep holds a long
# line in its own process); a match spanning two pieces of a longer line is not found.
_SEARCH_PIECE_BYTES = 1 << 20
# A .gitignore larger than this is read only this far.
_GITIGNORE_MAX_BYTES = 1 << 20
_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
# A ripgrep event longer than this (a match in a line of megabytes) is not held: its file is
# searched again in Python, in pieces.
_RG_EVENT_MAX_BYTES = 1 << 20
_RG_EVENT_PATH = re.compile(rb'"path":\{"text":"(/proc/self/fd/\d+)"')
# ripgrep reads the files opened here as /proc/self/fd/N; without /proc the search is Python's.
_PROC_FDS = os.path.isdir("/proc/self/fd")


@dataclass(frozen=True)
class _Entry:
    path: Path  # absolute, under a root
    rel: tuple[str, ...]  # the names from the top of the walk down to it
    is_dir: bool
    is_link: bool
    # A regular file: only these are searched (a FIFO or a device would block the reader).
    is_file: bool


class _Ignores:
    """The .gitignore rules in force in one directory: each file's rules with its directory."""

    def __init__(self, layers: tuple[tuple[Path, GitIgnoreSpec], ...] = ()) -> None:
        self.layers = layers

    def with_dir(self, dir_fd: int, directory: Path) -> _Ignores:
        spec = _load_gitignore(dir_fd)
        return self if spec is None else _Ignores((*self.layers, (directory, spec)))

    def ignored(self, path: Path, *, is_dir: bool) -> bool:
        # The deepest .gitignore with a matching rule decides (git's precedence); within one
        # file the last matching rule wins, negations included (GitIgnoreSpec's own order).
        for base, spec in reversed(self.layers):
            rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
            decided = spec.check_file(rel).include
            if decided is not None:
                return decided
        return False


def _load_gitignore(dir_fd: int) -> GitIgnoreSpec | None:
    # Never through a symlink (git does not follow a symlinked .gitignore either).
    try:
        fd = os.open(".gitignore", _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _GITIGNORE_MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(data.decode("utf-8", errors="replace").splitlines())


def root_of(workspace: Workspace, real: Path) -> Path:
    # The deepest root holding the path: its .gitignore files are the nearest ones that apply.
    holding = [r for r in workspace.roots if real == r or r in real.parents]
    return max(holding, key=lambda r: len(r.parts))


def visible_files(workspace: Workspace, top: Opened) -> Iterator[_Entry]:
    """Every entry under the directory `top` holds that a person would see in the repository,
    sorted, depth first.

    The .gitignore files from the root down to `top` apply as well as those below it; an
    ignored directory is not entered (git cannot re-include a file inside one); `.git` is
    never shown; a symlink is shown but never followed, so nothing outside the roots is read.
    """
    assert top.fd is not None
    root = root_of(workspace, top.path)
    ignores = _Ignores()
    for fd, ancestor in top.ancestors:
        if ancestor == root or root in ancestor.parents:
            ignores = ignores.with_dir(fd, ancestor)
    yield from _walk(top.fd, top.path, (), ignores.with_dir(top.fd, top.path))


def _walk(
    dir_fd: int, directory: Path, rel: tuple[str, ...], ignores: _Ignores
) -> Iterator[_Entry]:
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return  # unreadable directories are skipped, as git and ripgrep skip them
    for entry in entries:
        if entry.name == ".git":
            continue
        path = directory / entry.name
        try:
            is_link = entry.is_symlink()
            is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            is_file = not is_link and entry.is_file(follow_symlinks=False)
        except OSError:
            continue  # gone since the directory was read
        if ignores.ignored(path, is_dir=is_dir):
            continue
        yield _Entry(path, (*rel, entry.name), is_dir, is_link, is_file)
        if is_dir:
            # Entered through its descriptor: swapped for a symlink since, it is not entered.
            try:
                sub = os.open(entry.name, _SUBDIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue
            try:
                yield from _walk(sub, path, (*rel, entry.name), ignores.with_dir(sub, path))
            finally:
                os.close(sub)


def _glob(pattern: str | None) -> GitIgnoreSpec | None:
    # The same pattern language as .gitignore: "*.py" matches at any depth, "src/*.py" only
    # under the listed directory, "**" spans directories.
    if not pattern or pattern in ("*", "**", "**/*"):
        return None
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines([pattern])


def _glob_matches(spec: GitIgnoreSpec | None, entry: _Entry) -> bool:
    if spec is None:
        return True
    return spec.match_file("/".join(entry.rel) + ("/" if entry.is_dir else ""))


# ---------------------------------------------------------------------------------------------
# list_files


def list_entries(workspace: Workspace, path: str, pattern: str | None, *, max_chars: int) -> str:
    """The entries under `path` matching `pattern`, one a line; a file names only itself.

    Names are shown with their control characters written out, one entry a line.
    """
    with workspace.open(path) as top:
        assert top.fd is not None
        if not stat.S_ISDIR(os.fstat(top.fd).st_mode):
            return workspace.show(top.path)
        return _listing(workspace, top, pattern, max_chars)


def _listing(workspace: Workspace, top: Opened, pattern: str | None, max_chars: int) -> str:
    spec = _glob(pattern)
    shown: list[str] = []
    more = 0
    for entry in visible_files(workspace, top):
        if not _glob_matches(spec, entry):
            continue
        if len(shown) >= LIST_MAX_ENTRIES:
            more += 1
            continue
        name = workspace.show(entry.path)
        shown.append(name + ("/" if entry.is_dir else "@" if entry.is_link else ""))
    if not shown:
        where = workspace.show(top.path)
        return f"(nothing in {where} matches {pattern!r})" if spec else f"({where} is empty)"
    rows, left = _fit(shown, max_chars)
    if left + more:
        rows.append(f"… and {left + more} more entries (narrow with path or pattern)")
    return "\n".join(rows)


def _fit(rows: list[str], max_chars: int) -> tuple[list[str], int]:
    """As many whole rows as fit in `max_chars` (room left for a closing note), and how many
    did not."""
    budget = max_chars - 120
    used = 0
    for i, row in enumerate(rows):
        used += len(row) + 1
        if used > budget:
            return rows[:i], len(rows) - i
    return rows, 0


# ---------------------------------------------------------------------------------------------
# search_files


@dataclass(frozen=True)
class _Match:
    order: int  # the file's place in the walk
    line_number: int
    text: str


def _search_targets(workspace: Workspace, top: Opened, pattern: str | None) -> list[_Entry]:
    assert top.fd is not None
    mode = os.fstat(top.fd).st_mode
    if stat.S_ISREG(mode):
        return [_Entry(top.path, (), False, False, True)]
    if not stat.S_ISDIR(mode):
        return []  # a FIFO or a device named directly: nothing to read
    spec = _glob(pattern)
    return [e for e in visible_files(workspace, top) if e.is_file and _glob_matches(spec, e)]


def _listed_targets(workspace: Workspace, path: str, pattern: str | None) -> list[_Entry]:
    with workspace.open(path) as top:
        return _search_targets(workspace, top, pattern)


def _open_target(top: Opened, rel: tuple[str, ...]) -> int | None:
    """The regular file `rel` names below `top`, opened without following a symlink anywhere
    on the way; None when it is not there, not a regular file, or unreadable."""
    assert top.fd is not None
    try:
        if not rel:
            fd = os.dup(top.fd)
        else:
            held: list[int] = []
            try:
                at = top.fd
                for name in rel[:-1]:
                    at = os.open(name, _PASS_FLAGS, dir_fd=at)
                    held.append(at)
                fd = os.open(rel[-1], _FILE_FLAGS, dir_fd=at)
            finally:
                for h in held:
                    os.close(h)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _line_text(raw: str) -> str:
    text = raw.rstrip("\n").removesuffix("\r")
    if len(text) > SEARCH_LINE_CHARS:
        return text[:SEARCH_LINE_CHARS] + "…"
    return text


def _search_file(fd: int, compiled: re.Pattern[str], order: int) -> list[_Match] | None:
    """The matching lines of one open file, or None for a binary one (a NUL anywhere)."""
    mine: list[_Match] = []
    number = 1
    with os.fdopen(fd, "rb") as fh:
        # Pieces of at most _SEARCH_PIECE_BYTES: a line of any length costs that much memory.
        for piece in iter(partial(fh.readline, _SEARCH_PIECE_BYTES), b""):
            if b"\0" in piece:
                return None  # ripgrep drops a file once it sees a NUL; so do we
            if not mine or mine[-1].line_number != number:
                line = piece.decode("utf-8", errors="replace")
                if compiled.search(line.rstrip("\n").removesuffix("\r")):
                    mine.append(_Match(order, number, _line_text(line)))
            if piece.endswith(b"\n"):
                number += 1
    return mine


def _search_python(
    workspace: Workspace, path: str, pattern: str | None, regex: str, ignore_case: bool
) -> tuple[list[Path], list[_Match], bool]:
    with workspace.open(path) as top:
        try:
            compiled = re.compile(regex, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {regex!r}: {exc}") from None
        targets = _search_targets(workspace, top, pattern)
        files = [e.path for e in targets]
        found: list[_Match] = []
        for order, entry in enumerate(targets):
            fd = _open_target(top, entry.rel)
            if fd is None:
                continue  # unreadable files are skipped, as ripgrep skips them
            try:
                mine = _search_file(fd, compiled, order)
            except OSError:
                continue
            found += mine or []
            if len(found) > _SEARCH_CEILING:
                return files, found, True
    return files, found, False


def _open_batch(
    workspace: Workspace, path: str, targets: list[_Entry], first: int
) -> dict[int, int]:
    """Open `targets` (the walk's order starting at `first`) below `path`: {order: fd}."""
    opened: dict[int, int] = {}
    try:
        with workspace.open(path) as top:
            for i, entry in enumerate(targets):
                fd = _open_target(top, entry.rel)
                if fd is not None:
                    opened[first + i] = fd
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def _rg_text(field: dict[str, Any], *, path: bool = False) -> str:
    # ripgrep sends what is not UTF-8 as base64: a path back as the name it was given, a line
    # with the same replacement characters the Python search shows.
    if "text" in field:
        return str(field["text"])
    raw = base64.b64decode(field.get("bytes", ""))
    return os.fsdecode(raw) if path else raw.decode("utf-8", errors="replace")


async def _search_ripgrep(
    rg: str, workspace: Workspace, path: str, pattern: str | None, regex: str, ignore_case: bool
) -> tuple[list[Path], list[_Match], bool]:
    # ripgrep searches exactly the files the walk found (its own ignore logic differs from
    # git's when a subdirectory is searched, and its --glob re-includes ignored files), and
    # reads each through a descriptor opened here: a name given to it would be looked up
    # again, through whatever symlink was swapped in meanwhile.
    targets = await anyio.to_thread.run_sync(
        partial(_listed_targets, workspace, path, pattern), abandon_on_cancel=True
    )
    files = [e.path for e in targets]
    found: list[_Match] = []
    # With no files at all ripgrep still checks the pattern, so a bad one is reported alike.
    for first in range(0, max(len(targets), 1), _RG_BATCH_FILES):
        batch = targets[first : first + _RG_BATCH_FILES]
        # Shielded: the descriptors it opens are closed here, by their owner, even on cancel.
        with anyio.CancelScope(shield=True):
            fds = await anyio.to_thread.run_sync(
                partial(_open_batch, workspace, path, batch, first)
            )
        try:
            more = await _rg_batch(rg, fds, regex, ignore_case, found)
        finally:
            for fd in fds.values():
                os.close(fd)
        if more or len(found) > _SEARCH_CEILING:
            return files, found, True
    return files, found, False


class _RipgrepEvents:
    """ripgrep's --json lines, read into matches; a binary file's are dropped at its end."""

    def __init__(self, order: dict[str, int], found: list[_Match]) -> None:
        self.order = order
        self.found = found
        self.pending: dict[str, list[_Match]] = {}
        self.finished = False  # the closing summary arrived: ripgrep ran to the end
        self.too_long: set[str] = set()  # files with an event too long to hold

    def feed(self, line: bytes) -> None:
        event = json.loads(line) if line.strip() else {}
        kind = event.get("type")
        data = event.get("data", {})
        if kind == "match":
            name = _rg_text(data["path"], path=True)
            if name in self.order and name not in self.too_long:
                text = _line_text(_rg_text(data["lines"]))
                self.pending.setdefault(name, []).append(
                    _Match(self.order[name], int(data["line_number"]), text)
                )
        elif kind == "end":
            name = _rg_text(data["path"], path=True)
            kept = self.pending.pop(name, [])
            # A file holding a NUL is binary: none of its lines are shown.
            if data.get("binary_offset") is None and name not in self.too_long:
                self.found.extend(kept)
        elif kind == "summary":
            self.finished = True

    async def read(self, stream: ByteReceiveStream) -> bool:
        """Feed every line of `stream`; True when the ceiling was passed and reading stopped.

        At most _RG_EVENT_MAX_BYTES of one line are held: a longer one is skipped as it
        streams by, and its file noted in `too_long`.
        """
        buffer = bytearray()
        skipping = False
        async for chunk in stream:
            while chunk:
                end = chunk.find(b"\n")
                if skipping:
                    skipping = end < 0
                    chunk = b"" if end < 0 else chunk[end + 1 :]
                elif end < 0:
                    buffer += chunk
                    chunk = b""
                    if len(buffer) > _RG_EVENT_MAX_BYTES:
                        found = _RG_EVENT_PATH.search(buffer[:4096])
                        if found:
                            self.too_long.add(found.group(1).decode())
                        buffer.clear()
                        skipping = True
                else:
                    buffer += chunk[:end]
                    chunk = chunk[end + 1 :]
                    self.feed(bytes(buffer))
                    buffer.clear()
            if len(self.found) > _SEARCH_CEILING:
                return True
        return False


async def _rg_batch(
    rg: str, fds: dict[int, int], regex: str, ignore_case: bool, found: list[_Match]
) -> bool:
    """Run ripgrep over the open files `fds` ({order: fd}), adding its matches to `found`;
    True when it was cut short.

    Cancelled, the process is killed (anyio's Process does so when its wait is cancelled).
    """
    order = {f"/proc/self/fd/{fd}": i for i, fd in fds.items()}
    argv = [rg, "--json", "--no-config", "--no-messages"]
    if ignore_case:
        argv.append("--ignore-case")
    argv += ["-e", regex, "--", *(order or [os.devnull])]
    events = _RipgrepEvents(order, found)
    errors = bytearray()
    async with await anyio.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=list(fds.values()),
    ) as proc:
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None

        async def drain_errors() -> None:
            async for chunk in stderr:
                errors.extend(chunk[: max(0, 4000 - len(errors))])

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain_errors)
            cut = await events.read(stdout)
            if cut:
                # Closing the pipe ends ripgrep at its next write. A kill instead could find
                # it already exited, and signalling makes Popen reap it behind asyncio's back.
                await stdout.aclose()
    if not cut and not events.finished:
        message = errors.decode("utf-8", errors="replace").strip()
        if "regex" in message:
            raise ToolError(f"invalid regular expression {regex!r}: {message}")
        raise ToolError(f"ripgrep failed: {message or f'exit status {proc.returncode}'}")
    for name in sorted(events.too_long, key=events.order.__getitem__):
        # The thread owns a copy of the descriptor: abandoned on cancel, it reads nothing else.
        job = partial(_search_again, os.dup(fds[events.order[name]]), regex, ignore_case)
        found += [
            _Match(events.order[name], m.line_number, m.text)
            for m in await anyio.to_thread.run_sync(job, abandon_on_cancel=True)
        ]
    return cut


def _search_again(fd: int, regex: str, ignore_case: bool) -> list[_Match]:
    """A file ripgrep matched in a line too long to take back, searched in Python's pieces
    (nothing when the pattern is not Python's dialect)."""
    try:
        compiled = re.compile(regex, re.IGNORECASE if ignore_case else 0)
        os.lseek(fd, 0, os.SEEK_SET)
    except (re.error, OSError):
        os.close(fd)
        return []
    try:
        return _search_file(fd, compiled, 0) or []
    except OSError:
        return []


def _render(
    workspace: Workspace, files: list[Path], found: list[_Match], cut: bool, max_chars: int
) -> str:
    if not found:
        return "(no matches)"
    found = sorted(found, key=lambda m: (m.order, m.line_number))
    rows = [
        f"{workspace.show(files[m.order])}:{m.line_number}:{m.text}"
        for m in found[:SEARCH_MAX_MATCHES]
    ]
    rows, left = _fit(rows, max_chars)
    narrow = "narrow the pattern, path or glob"
    if cut:
        rows.append(f"… more than {len(rows)} matches; {narrow}")
    elif left or len(found) > len(rows):
        rows.append(f"… and {len(found) - len(rows)} more matches; {narrow}")
    return "\n".join(rows)


async def search_tree(
    workspace: Workspace,
    path: str,
    regex: str,
    *,
    glob: str | None,
    ignore_case: bool,
    ripgrep: str | None,
    max_chars: int,
) -> str:
    """Matching lines under `path` as path:line:text, through `ripgrep` when given.

    Cancellation kills a running ripgrep; the walk in its worker thread finishes on its own.
    """
    if ripgrep is not None and _PROC_FDS:
        files, found, cut = await _search_ripgrep(
            ripgrep, workspace, path, glob, regex, ignore_case
        )
    else:
        files, found, cut = await anyio.to_thread.run_sync(
            partial(_search_python, workspace, path, glob, regex, ignore_case),
            abandon_on_cancel=True,
        )
    return _render(workspace, files, found, cut, max_chars)
