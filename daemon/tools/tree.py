"""The workspace as a person sees it in a repository, listed and searched.

Which files a listing or a search sees is decided in one place, `visible_files`:
`.gitignore` files (nested ones too, the deepest rule deciding) are honoured, `.git` is never
shown, symlinks are shown but never followed. The search hands exactly those files to
ripgrep when it is installed and reads them itself otherwise, so both ways find the same
lines in the same order. Globs use the `.gitignore` syntax as well.

The walking and the Python search block: call them from a worker thread.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream
from pathspec import GitIgnoreSpec

from daemon.tools.registry import ToolError
from daemon.tools.workspace import Workspace

# A listing shows this many entries, then says how many more there are.
LIST_MAX_ENTRIES = 500
# A search shows this many matching lines, each cut to this many characters.
SEARCH_MAX_MATCHES = 200
SEARCH_LINE_CHARS = 300
# Past this many matches a search stops looking: it says "more than", not how many.
_SEARCH_CEILING = SEARCH_MAX_MATCHES * 10
# ripgrep is handed this many bytes of file names per run (well under the kernel's ARG_MAX).
_RG_ARGV_BYTES = 96_000


@dataclass(frozen=True)
class _Entry:
    path: Path  # absolute, under a root
    is_dir: bool
    is_link: bool
    # A regular file: only these are searched (a FIFO or a device would block the reader).
    is_file: bool


class _Ignores:
    """The .gitignore rules in force in one directory: each file's rules with its directory."""

    def __init__(self, layers: tuple[tuple[Path, GitIgnoreSpec], ...] = ()) -> None:
        self.layers = layers

    def with_dir(self, directory: Path) -> _Ignores:
        spec = _load_gitignore(directory)
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


def _load_gitignore(directory: Path) -> GitIgnoreSpec | None:
    try:
        text = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return GitIgnoreSpec.from_lines(text.splitlines())


def root_of(workspace: Workspace, real: Path) -> Path:
    # The deepest root holding the path: its .gitignore files are the nearest ones that apply.
    holding = [r for r in workspace.roots if real == r or r in real.parents]
    return max(holding, key=lambda r: len(r.parts))


def visible_files(workspace: Workspace, top: Path) -> Iterator[_Entry]:
    """Every entry under `top` a person would see in the repository, sorted, depth first.

    The .gitignore files from the root down to `top` apply as well as those below it; an
    ignored directory is not entered (git cannot re-include a file inside one); `.git` is
    never shown; a symlink is shown but never followed, so nothing outside the roots is read.
    """
    root = root_of(workspace, top)
    ignores = _Ignores()
    for ancestor in reversed([top, *top.parents]):
        if ancestor == top:
            break
        if ancestor == root or root in ancestor.parents:
            ignores = ignores.with_dir(ancestor)
    yield from _walk(top, ignores.with_dir(top))


def _walk(directory: Path, ignores: _Ignores) -> Iterator[_Entry]:
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return  # unreadable directories are skipped, as git and ripgrep skip them
    for entry in entries:
        if entry.name == ".git":
            continue
        path = directory / entry.name
        is_link = entry.is_symlink()
        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        if ignores.ignored(path, is_dir=is_dir):
            continue
        yield _Entry(path, is_dir, is_link, not is_link and entry.is_file(follow_symlinks=False))
        if is_dir:
            yield from _walk(path, ignores.with_dir(path))


def _glob(pattern: str | None) -> GitIgnoreSpec | None:
    # The same pattern language as .gitignore: "*.py" matches at any depth, "src/*.py" only
    # under the listed directory, "**" spans directories.
    if not pattern or pattern in ("*", "**", "**/*"):
        return None
    return GitIgnoreSpec.from_lines([pattern])


def _glob_matches(spec: GitIgnoreSpec | None, top: Path, entry: _Entry) -> bool:
    if spec is None:
        return True
    rel = entry.path.relative_to(top).as_posix() + ("/" if entry.is_dir else "")
    return spec.match_file(rel)


# ---------------------------------------------------------------------------------------------
# list_files


def list_entries(workspace: Workspace, top: Path, pattern: str | None, *, max_chars: int) -> str:
    """The entries under `top` matching `pattern`, one a line; a file names only itself."""
    if not top.is_dir():
        return workspace.relative(top)
    spec = _glob(pattern)
    shown: list[str] = []
    more = 0
    for entry in visible_files(workspace, top):
        if not _glob_matches(spec, top, entry):
            continue
        if len(shown) >= LIST_MAX_ENTRIES:
            more += 1
            continue
        name = workspace.relative(entry.path)
        shown.append(name + ("/" if entry.is_dir else "@" if entry.is_link else ""))
    if not shown:
        where = workspace.relative(top)
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


def _search_targets(workspace: Workspace, top: Path, pattern: str | None) -> list[Path]:
    if top.is_file():
        return [top]
    spec = _glob(pattern)
    return [
        e.path for e in visible_files(workspace, top) if e.is_file and _glob_matches(spec, top, e)
    ]


def _line_text(raw: str) -> str:
    text = raw.rstrip("\n").removesuffix("\r")
    if len(text) > SEARCH_LINE_CHARS:
        return text[:SEARCH_LINE_CHARS] + "…"
    return text


def _search_python(files: list[Path], regex: str, ignore_case: bool) -> tuple[list[_Match], bool]:
    try:
        compiled = re.compile(regex, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {regex!r}: {exc}") from None
    found: list[_Match] = []
    for order, path in enumerate(files):
        mine: list[_Match] = []
        binary = False
        try:
            with path.open("rb") as fh:
                for number, raw in enumerate(fh, start=1):
                    if b"\0" in raw:
                        binary = True  # ripgrep drops a file once it sees a NUL; so do we
                        break
                    line = raw.decode("utf-8", errors="replace")
                    if compiled.search(line.rstrip("\n").removesuffix("\r")):
                        mine.append(_Match(order, number, _line_text(line)))
        except OSError:
            continue  # unreadable files are skipped, as ripgrep skips them
        if not binary:
            found += mine
        if len(found) > _SEARCH_CEILING:
            return found, True
    return found, False


def _rg_text(field: dict[str, Any], *, path: bool = False) -> str:
    # ripgrep sends what is not UTF-8 as base64: a path back as the name it was given, a line
    # with the same replacement characters the Python search shows.
    if "text" in field:
        return str(field["text"])
    raw = base64.b64decode(field.get("bytes", ""))
    return os.fsdecode(raw) if path else raw.decode("utf-8", errors="replace")


async def _search_ripgrep(
    rg: str, root: Path, files: list[Path], regex: str, ignore_case: bool
) -> tuple[list[_Match], bool]:
    # ripgrep searches exactly the files the walk found (its own ignore logic differs from
    # git's when a subdirectory is searched, and its --glob re-includes ignored files).
    names = [str(p.relative_to(root)) for p in files]
    order = {name: i for i, name in enumerate(names)}
    batches: list[list[str]] = []
    batch: list[str] = []
    size = 0
    for name in names:
        if batch and size + len(name) + 1 > _RG_ARGV_BYTES:
            batches.append(batch)
            batch, size = [], 0
        batch.append(name)
        size += len(name) + 1
    # With no files at all ripgrep still checks the pattern, so a bad one is reported alike.
    batches.append(batch or [os.devnull])
    found: list[_Match] = []
    for names_now in batches:
        more = await _rg_batch(rg, root, names_now, regex, ignore_case, order, found)
        if more or len(found) > _SEARCH_CEILING:
            return found, True
    return found, False


class _RipgrepEvents:
    """ripgrep's --json lines, read into matches; a binary file's are dropped at its end."""

    def __init__(self, order: dict[str, int], found: list[_Match]) -> None:
        self.order = order
        self.found = found
        self.pending: dict[str, list[_Match]] = {}
        self.finished = False  # the closing summary arrived: ripgrep ran to the end

    def feed(self, line: bytes) -> None:
        event = json.loads(line) if line.strip() else {}
        kind = event.get("type")
        data = event.get("data", {})
        if kind == "match":
            name = _rg_text(data["path"], path=True)
            if name in self.order:
                text = _line_text(_rg_text(data["lines"]))
                self.pending.setdefault(name, []).append(
                    _Match(self.order[name], int(data["line_number"]), text)
                )
        elif kind == "end":
            kept = self.pending.pop(_rg_text(data["path"], path=True), [])
            # A file holding a NUL is binary: none of its lines are shown.
            if data.get("binary_offset") is None:
                self.found.extend(kept)
        elif kind == "summary":
            self.finished = True

    async def read(self, stream: ByteReceiveStream) -> bool:
        """Feed every line of `stream`; True when the ceiling was passed and reading stopped."""
        buffer = b""
        async for chunk in stream:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.feed(line)
            if len(self.found) > _SEARCH_CEILING:
                return True
        return False


async def _rg_batch(
    rg: str,
    root: Path,
    names: list[str],
    regex: str,
    ignore_case: bool,
    order: dict[str, int],
    found: list[_Match],
) -> bool:
    """Run ripgrep over `names`, adding its matches to `found`; True when it was cut short.

    Cancelled, the process is killed (anyio's Process does so when its wait is cancelled).
    """
    argv = [rg, "--json", "--no-config", "--no-messages"]
    if ignore_case:
        argv.append("--ignore-case")
    argv += ["-e", regex, "--", *names]
    events = _RipgrepEvents(order, found)
    errors = bytearray()
    async with await anyio.open_process(
        argv, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
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
    return cut


def _render(
    workspace: Workspace, files: list[Path], found: list[_Match], cut: bool, max_chars: int
) -> str:
    if not found:
        return "(no matches)"
    found = sorted(found, key=lambda m: (m.order, m.line_number))
    rows = [
        f"{workspace.relative(files[m.order])}:{m.line_number}:{m.text}"
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
    top: Path,
    regex: str,
    *,
    glob: str | None,
    ignore_case: bool,
    ripgrep: str | None,
    max_chars: int,
) -> str:
    """Matching lines under `top` as path:line:text, through `ripgrep` when given.

    Cancellation kills a running ripgrep; the walk in its worker thread finishes on its own.
    """
    files = await anyio.to_thread.run_sync(
        partial(_search_targets, workspace, top, glob), abandon_on_cancel=True
    )
    if ripgrep is not None:
        root = root_of(workspace, top)
        found, cut = await _search_ripgrep(ripgrep, root, files, regex, ignore_case)
    else:
        found, cut = await anyio.to_thread.run_sync(
            partial(_search_python, files, regex, ignore_case), abandon_on_cancel=True
        )
    return _render(workspace, files, found, cut, max_chars)
