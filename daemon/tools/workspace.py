"""The workspace: the directories the work tools may act in, and how a path in it is reached.

A path a model names is walked from the root it lies in, one name at a time, each directory
opened relative to the one before with `O_NOFOLLOW` (`openat`), and the file tools act only on
what that walk holds open: a directory swapped for a symlink after a check cannot redirect a
read or a write, because nothing is looked up by its path again. A symlink met on the way is
read and followed only while its target stays inside a root (relative targets from where the
link is, absolute ones from the root they name); `..` steps back along the walk and never above
a root. A symlink that leads out is refused like an absolute path outside the roots.

`resolve` answers the same question by the path alone (realpath); it is for what only needs a
name (a permission rule, `run`'s working directory), never for touching a file.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from daemon.paths import Home
from daemon.settings import Settings
from daemon.tools.registry import ToolError
from daemon.tools.summary import visible

# Symlinks followed in one walk, as many as the kernel itself follows in one lookup.
MAX_LINK_HOPS = 40
# A directory held only to walk from: no read permission needed, and never a file's content.
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# What the walk opens its end with: readable, and a FIFO cannot make the open wait.
_LEAF_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Opened:
    """A workspace path walked from its root and held open; close it (or use `with`).

    `fd` is the thing itself, opened for reading (`None` when nothing is there yet);
    `parent` and `name` are the directory holding it and its name there, which is where a
    write creates and renames (`None` for a root itself, or below a directory that does not
    exist yet); `ancestors` are the directories from the root down to `parent`, held open.
    """

    path: Path
    fd: int | None
    parent: int | None
    name: str | None
    ancestors: list[tuple[int, Path]] = field(default_factory=list)

    def close(self) -> None:
        fds = [fd for fd, _ in self.ancestors]
        if self.fd is not None:
            fds.append(self.fd)
        self.ancestors, self.fd, self.parent = [], None, None
        for fd in fds:
            os.close(fd)

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_link_error(exc: OSError) -> bool:
    # O_NOFOLLOW meets a symlink as ELOOP, O_DIRECTORY|O_NOFOLLOW as ENOTDIR.
    return exc.errno in (errno.ELOOP, errno.ENOTDIR)


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


@dataclass(frozen=True)
class Workspace:
    roots: tuple[Path, ...]

    @classmethod
    def for_home(cls, home: Home, settings: Settings) -> Workspace:
        """<home>/workspace first, then the configured roots (`~` expanded), deduplicated."""
        roots: list[Path] = [home.workspace_dir]
        for raw in settings.workspace.roots:
            path = Path(os.path.expanduser(raw))
            roots.append(path if path.is_absolute() else home.root / path)
        seen: dict[Path, None] = {}
        for root in roots:
            seen.setdefault(Path(os.path.realpath(root)), None)
        return cls(tuple(seen))

    @property
    def primary(self) -> Path:
        return self.roots[0]

    def contains(self, real: Path) -> bool:
        return any(real == root or root in real.parents for root in self.roots)

    def _candidate(self, path: str) -> Path:
        if not path or "\x00" in path:
            raise ToolError("a path is required (no NUL characters)")
        given = Path(os.path.expanduser(path))
        return given if given.is_absolute() else self.primary / given

    @staticmethod
    def _realpath(candidate: Path, path: str) -> str:
        # realpath itself can be raced: a name lstat saw as a symlink is a directory by the time
        # it is read (EINVAL). That is a path in motion, not a daemon fault.
        for _ in range(3):
            try:
                return os.path.realpath(candidate)
            except OSError:
                continue
        raise ToolError(f"{path!r} kept changing while it was being resolved; try again")

    def _outside(self, path: str) -> ToolError:
        return ToolError(f"{path!r} is outside the workspace ({self.describe()}); refused")

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        """The real path `path` names, inside a root; ToolError (readable by the model) if not.

        By name only: what the path leads to can change afterwards. Touch files through `open`.
        """
        candidate = self._candidate(path)
        # realpath follows every symlink that exists, so an escaping link is seen for what it is;
        # a path that does not exist yet resolves through its nearest existing parent.
        real = Path(self._realpath(candidate, path))
        if not self.contains(real):
            raise self._outside(path)
        if must_exist and not real.exists():
            raise ToolError(f"{path!r} does not exist in the workspace")
        return real

    def _split(self, absolute: str) -> tuple[Path, list[str]] | None:
        """The deepest root `absolute` lies under, by its names alone, and the names below it."""
        parts = [p for p in absolute.split("/") if p]
        best: tuple[Path, list[str]] | None = None
        for root in self.roots:
            depth = len(root.parts) - 1
            if parts[:depth] == list(root.parts[1:]) and (
                best is None or depth > len(best[0].parts) - 1
            ):
                best = (root, parts[depth:])
        return best

    def open(self, path: str, *, must_exist: bool = True, create_dirs: bool = False) -> Opened:
        """Walk `path` from its root with no lookup that can be raced, and hold it open.

        ToolError when it leads out of the roots (or, with `must_exist`, to nothing);
        OSError for what the file system refuses (a file where a directory is named, no
        permission). `create_dirs` makes the missing directories on the way, as a write does.
        Blocks: call it from a worker thread.
        """
        candidate = self._candidate(path)
        start = self._split(str(candidate))
        if start is None:
            # A path reaching a root through a link outside the workspace (~/ws-link/notes):
            # where it leads by name decides the root; the walk from there is what counts.
            start = self._split(self._realpath(candidate, path))
            if start is None:
                raise self._outside(path)
        root, rest = start
        stack: list[tuple[int, Path]] = []
        try:
            return self._walk(
                path, root, rest, stack, must_exist=must_exist, create_dirs=create_dirs
            )
        except BaseException:
            for fd, _ in stack:
                os.close(fd)
            raise

    def _walk(
        self,
        path: str,
        root: Path,
        rest: list[str],
        stack: list[tuple[int, Path]],
        *,
        must_exist: bool,
        create_dirs: bool,
    ) -> Opened:
        stack.append((os.open(root, _DIR_FLAGS), root))
        todo = [p for p in rest if p != "."][::-1]  # a stack of names: the next one is last
        hops = 0
        while todo:
            part = todo.pop()
            if part in ("", "."):
                continue
            top, here = stack[-1]
            if part == "..":
                if len(stack) > 1:
                    os.close(stack.pop()[0])
                    continue
                # Above a root: only another root can take the walk on from there.
                above = "/".join([str(here.parent).rstrip("/"), *todo[::-1]])
                again = self._split(above or "/")
                if again is None:
                    raise self._outside(path)
                os.close(stack.pop()[0])
                stack.append((os.open(again[0], _DIR_FLAGS), again[0]))
                todo = [p for p in again[1] if p != "."][::-1]
                continue
            last = not any(p not in ("", ".") for p in todo)
            try:
                fd = os.open(part, _LEAF_FLAGS if last else _DIR_FLAGS, dir_fd=top)
            except FileNotFoundError:
                if last:
                    if must_exist:
                        raise ToolError(f"{path!r} does not exist in the workspace") from None
                    return Opened(here / part, None, top, part, stack)
                if create_dirs:
                    hops += 1  # a directory removed as fast as it is made ends the walk too
                    if hops > MAX_LINK_HOPS:
                        raise
                    try:
                        os.mkdir(part, 0o777, dir_fd=top)
                    except FileExistsError:
                        pass  # made meanwhile: the next try opens (or follows) it
                    todo.append(part)
                    continue
                if must_exist:
                    raise ToolError(f"{path!r} does not exist in the workspace") from None
                missing = os.path.normpath("/".join([part, *todo[::-1]]))
                return Opened(here / missing, None, None, None, stack)
            except OSError as exc:
                if not _is_link_error(exc):
                    raise
                try:
                    target = os.readlink(part, dir_fd=top)
                except OSError:
                    raise exc from None  # not a link: a file where a directory was named
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                if target.startswith("/"):
                    jump = self._split(target)
                    if jump is None:
                        raise self._outside(path) from None
                    while stack:
                        os.close(stack.pop()[0])
                    stack.append((os.open(jump[0], _DIR_FLAGS), jump[0]))
                    todo += jump[1][::-1]
                else:
                    todo += _parts(target)[::-1]
                continue
            if last:
                return Opened(here / part, fd, top, part, stack)
            stack.append((fd, here / part))
        # The walk ended on a directory it holds (a root, or a path ending in `..`).
        top, here = stack.pop()
        try:
            fd = os.open(".", _LEAF_FLAGS, dir_fd=top)
        finally:
            os.close(top)
        parent = stack[-1][0] if stack else None
        return Opened(here, fd, parent, here.name if stack else None, stack)

    def relative(self, real: Path) -> str:
        """How a resolved path is shown back: relative to its root, or absolute for other roots."""
        if real == self.primary:
            return "."
        if self.primary in real.parents:
            return str(real.relative_to(self.primary))
        return str(real)

    def show(self, real: Path) -> str:
        """`relative(real)` for the model to read: a control character in a name is written
        out (`a\\x0ab.txt`), so a name holding a line break cannot pass for two entries."""
        return visible(self.relative(real), keep="")

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)
