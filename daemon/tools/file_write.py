"""Writing inside the workspace: the change a write or an edit makes, its diff, the atomic replace.

`plan_write` and `plan_edit` read what is there through the descriptor the walk holds and say
what would change (the diff the person approves); `apply_change` writes it: a temporary file
made in the directory the walk holds, then renamed there, keeping the file's mode and never
following a link at the temporary name.
"""

from __future__ import annotations

import difflib
import os
import secrets
import stat
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from daemon.tools.file_read import READ_BLOCK_BYTES, is_binary, opened_fd
from daemon.tools.registry import ToolError
from daemon.tools.workspace import Opened, Workspace


def unified_diff(before: str, after: str, name: str, *, new_file: bool = False) -> str:
    """A unified diff of a text file, named by its workspace-relative path."""

    def lines(text: str) -> list[str]:
        out = text.splitlines(keepends=True)
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    diff = difflib.unified_diff(
        lines(before),
        lines(after),
        fromfile="/dev/null" if new_file else f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(diff)


def _current_umask() -> int:
    # Reading the umask without setting it (os.umask would race with other threads).
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def replace_file(parent: int, name: str, data: bytes, st: os.stat_result | None) -> None:
    """Write `data` as `name` in the directory `parent` atomically, keeping the mode and,
    where allowed, the owner of the file `st` describes (a new file: mode 0666 & ~umask).

    The temporary file is made with O_EXCL|O_NOFOLLOW under a random name in the same
    directory descriptor and renamed there, so no link planted beside the target, and no
    directory swapped on the way, can redirect the write.
    """
    mode = stat.S_IMODE(st.st_mode) if st else 0o666 & ~_current_umask()
    for _ in range(100):
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=parent,
            )
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {name}")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if st and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                # Someone else's file stays theirs where we may say so (a daemon run as root).
                with suppress(PermissionError):
                    os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.rename(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=parent)
        raise
    with suppress(OSError):
        dir_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@dataclass(frozen=True)
class Change:
    shown: str
    before: str
    after: str
    existed: bool
    st: os.stat_result | None = None
    line: int | None = None

    @property
    def data(self) -> bytes:
        return self.after.encode("utf-8")

    def diff(self) -> str:
        return unified_diff(self.before, self.after, self.shown, new_file=not self.existed)


def _regular(opened: Opened, shown: str) -> os.stat_result | None:
    """The stat of the file `opened` holds (None when there is none yet); refuses the rest."""
    if opened.fd is None:
        return None
    st = os.fstat(opened.fd)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory; give a file path")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{shown} is not a regular file")
    return st


def _existing_text(fd: int, st: os.stat_result, shown: str, max_bytes: int) -> str:
    if st.st_size > max_bytes:
        raise ToolError(f"{shown} is {st.st_size} bytes, over the {max_bytes}-byte write limit")
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes and (chunk := os.pread(fd, READ_BLOCK_BYTES, size)):
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise ToolError(f"{shown} is over the {max_bytes}-byte write limit")
    data = b"".join(chunks)
    if is_binary(data):
        raise ToolError(f"{shown} is a binary file; the file tools change text files only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(
            f"{shown} is not UTF-8 text; the file tools change text files only"
        ) from None


def check_write(path: str, content: str, max_bytes: int) -> None:
    # Before any walk: a refused write makes no directory.
    if path.endswith(("/", os.sep)):
        raise ToolError(f"{path!r} names a directory; give a file path")
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise ToolError(f"the content is {size} bytes, over the {max_bytes}-byte write limit")


def plan_write(workspace: Workspace, opened: Opened, content: str, max_bytes: int) -> Change:
    shown = workspace.show(opened.path)
    st = _regular(opened, shown)
    before = ""
    if st is not None:
        # Replacing a binary or huge file is still allowed; only its diff is not shown.
        try:
            before = _existing_text(opened_fd(opened), st, shown, max_bytes)
        except ToolError:
            before = f"({shown}: {st.st_size} bytes not shown)\n"
    return Change(shown, before, content, st is not None, st)


def plan_edit(workspace: Workspace, opened: Opened, old: str, new: str, max_bytes: int) -> Change:
    shown = workspace.show(opened.path)
    st = _regular(opened, shown)
    assert st is not None
    if old == new:
        raise ToolError("old_string and new_string are the same; there is nothing to change")
    before = _existing_text(opened_fd(opened), st, shown, max_bytes)
    count = before.count(old)
    if count == 0 and "\r\n" in before and "\n" in old and "\r" not in old:
        # read_file shows CRLF lines without their \r, so the model quotes them with \n alone:
        # match them as the file has them, and keep the file's line endings in the new text.
        old, new = old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
        count = before.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {shown}; read the file and copy the text exactly, "
            "whitespace and indentation included"
        )
    if count > 1:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; add surrounding lines so it matches "
            "exactly one place"
        )
    at = before.index(old)
    after = before[:at] + new + before[at + len(old) :]
    size = len(after.encode("utf-8"))
    if size > max_bytes:
        raise ToolError(
            f"the edited file would be {size} bytes, over the {max_bytes}-byte write limit"
        )
    return Change(shown, before, after, True, st, line=before.count("\n", 0, at) + 1)


def apply_change(opened: Opened, change: Change) -> None:
    if opened.parent is None or opened.name is None:
        raise ToolError(f"{change.shown} is a directory; give a file path")
    try:
        replace_file(opened.parent, opened.name, change.data, change.st)
    except OSError as exc:
        raise ToolError(f"could not write {change.shown}: {exc.strerror or exc}") from None
