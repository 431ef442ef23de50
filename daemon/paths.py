"""Where things live: the shipped defaults and a home's layout.

A *home* is one agent's state directory (`--home`, `REVERIE_HOME`, `$STATE_DIRECTORY`, or
`./var` in a checkout). Everything the agent is — persona, memory files, transcripts, the
index database — lives under it, so several homes can sit side by side.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

PERSONA_FILES = ("SOUL.md", "STYLE.md", "REGISTER.md", "NEUROLOGY.md", "USER.md")


def shipped_dir() -> Path:
    """Return the folder holding the shipped defaults (`config/` in a checkout)."""
    here = Path(__file__).resolve().parent
    packaged = here / "_shipped"
    if packaged.is_dir():
        return packaged
    return here.parent / "config"


def default_home(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("REVERIE_HOME"):
        return Path(env["REVERIE_HOME"])
    if env.get("STATE_DIRECTORY"):
        # systemd may pass several colon-separated directories; the first is ours.
        return Path(env["STATE_DIRECTORY"].split(":")[0])
    return Path.cwd() / "var"


@dataclass(frozen=True, slots=True)
class Home:
    """The layout of one home directory."""

    root: Path

    @property
    def config_file(self) -> Path:
        return self.root / "reverie.toml"

    @property
    def persona_dir(self) -> Path:
        return self.root / "persona"

    @property
    def matrix_file(self) -> Path:
        return self.root / "PERSONALITY_MATRIX.md"

    @property
    def topics_dir(self) -> Path:
        return self.root / "topics"

    @property
    def wake_file(self) -> Path:
        return self.root / "WAKE.md"

    @property
    def facts_file(self) -> Path:
        return self.root / "FACTS.md"

    @property
    def knowledge_file(self) -> Path:
        """The person's reference notes, searched by each message when long (`KNOWLEDGE.md`)."""
        return self.root / "KNOWLEDGE.md"

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def trunk_dir(self) -> Path:
        return self.sessions_dir / "trunk"

    @property
    def forks_dir(self) -> Path:
        return self.sessions_dir / "forks"

    @property
    def imported_dir(self) -> Path:
        return self.sessions_dir / "imported"

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def summaries_dir(self) -> Path:
        return self.memory_dir / "sessions"

    @property
    def journal_dir(self) -> Path:
        return self.root / "journal"

    @property
    def dreams_dir(self) -> Path:
        return self.root / "dreams"

    @property
    def db_file(self) -> Path:
        return self.root / "reverie.db"

    @property
    def inbox_file(self) -> Path:
        return self.root / "inbox.jsonl"

    @property
    def lock_file(self) -> Path:
        return self.root / "reverie.lock"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def workspace_dir(self) -> Path:
        """The work tools' default root: files the agent reads, writes and runs commands in."""
        return self.root / "workspace"

    def socket_path(self, configured: str | None, environ: dict[str, str] | None = None) -> Path:
        """Resolve the chat socket: config, then `$RUNTIME_DIRECTORY`, then `<home>/run/`."""
        env = os.environ if environ is None else environ
        if configured:
            path = Path(configured)
            return path if path.is_absolute() else self.root / path
        if env.get("RUNTIME_DIRECTORY"):
            return Path(env["RUNTIME_DIRECTORY"].split(":")[0]) / "reverie.sock"
        return self.run_dir / "reverie.sock"

    def ensure(self) -> bool:
        """Create the home with the shipped defaults if it is new; return True when created.

        Existing files are never overwritten, so a person's edits survive upgrades; a symlink
        counts as existing even when it leads nowhere (writing through it would create a file
        wherever it points), and `persona_problem` names what is wrong with it.
        """
        created = not self.config_file.exists()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if created:
            # A new home holds a person's memories: private from the start.
            self.root.chmod(0o700)
        src = shipped_dir()
        for path in (
            self.persona_dir,
            self.topics_dir,
            self.trunk_dir,
            self.forks_dir,
            self.imported_dir,
            self.summaries_dir,
            self.journal_dir,
            self.dreams_dir,
            self.workspace_dir,
        ):
            path.mkdir(parents=True, exist_ok=True)
        _copy_missing(src / "reverie.toml", self.config_file)
        _copy_missing(src / "PERSONALITY_MATRIX.md", self.matrix_file)
        for name in PERSONA_FILES:
            _copy_missing(src / "persona" / name, self.persona_dir / name)
        if (src / "topics").is_dir():
            for topic in sorted((src / "topics").glob("*.md")):
                _copy_missing(topic, self.topics_dir / topic.name)
        for path, text in (
            (
                self.wake_file,
                "# Wake-up notes\n\n(Nothing yet: written at the end of each sleep cycle.)\n",
            ),
            (
                self.facts_file,
                "# Pinned facts\n\n(Slow-changing facts that are always in context. Edit freely.)\n",
            ),
        ):
            if not _present(path):
                path.write_text(text)
        return created


def _present(path: Path) -> bool:
    return path.is_symlink() or path.exists()


def _copy_missing(src: Path, dst: Path) -> None:
    if src.exists() and not _present(dst):
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def persona_problem(path: Path) -> str | None:
    """Say what keeps a persona file from being read as text, or None when it reads (or is absent).

    The sentence follows the file's path: "… is a directory, expected a markdown file".
    """
    try:
        path.stat()
    except FileNotFoundError:
        if not path.is_symlink():
            return None
        return f"is a symlink to {_link_target(path)}, which does not exist; fix or remove the link"
    except OSError as exc:
        if path.is_symlink():
            why = "loops back on itself" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
            return f"is a symlink to {_link_target(path)} that cannot be followed ({why})"
        return f"cannot be read ({exc.strerror or exc})"
    try:
        path.read_text(encoding="utf-8")
    except PermissionError:
        return "is not readable (permission denied); fix its permissions"
    except UnicodeDecodeError:
        return "is not valid UTF-8 text"
    except IsADirectoryError:
        return "is a directory, expected a markdown file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None
