"""The workspace: the directories the work tools may act in, and the one place paths resolve.

Every path a model names is resolved here before anything touches the file system: relative
paths against the first root, `..` and symlinks followed to where they really lead, and the
result refused unless it lies inside one of the roots. A symlink inside the workspace that
points out of it is refused like an absolute path outside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from daemon.paths import Home
from daemon.settings import Settings
from daemon.tools.registry import ToolError


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

    def resolve(self, path: str, *, must_exist: bool = True) -> Path:
        """The real path `path` names, inside a root; ToolError (readable by the model) if not."""
        if not path or "\x00" in path:
            raise ToolError("a path is required (no NUL characters)")
        given = Path(os.path.expanduser(path))
        candidate = given if given.is_absolute() else self.primary / given
        # realpath follows every symlink that exists, so an escaping link is seen for what it is;
        # a path that does not exist yet resolves through its nearest existing parent.
        real = Path(os.path.realpath(candidate))
        if not self.contains(real):
            raise ToolError(f"{path!r} is outside the workspace ({self.describe()}); refused")
        if must_exist and not real.exists():
            raise ToolError(f"{path!r} does not exist in the workspace")
        return real

    def relative(self, real: Path) -> str:
        """How a resolved path is shown back: relative to its root, or absolute for other roots."""
        if real == self.primary:
            return "."
        if self.primary in real.parents:
            return str(real.relative_to(self.primary))
        return str(real)

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)
