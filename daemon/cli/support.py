"""Shared plumbing for `reverie` subcommands: home and settings resolution, clean failure.

Each system contributes its subcommands with `add_commands(subparsers)`; a subcommand's
`func(args)` returns an exit code (or a coroutine returning one). Anything wrong ends as one
line on stderr and a non-zero exit — never a traceback.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.cli.locate import home_dir
from daemon.config_sources import ConfigError
from daemon.errors import ReverieError
from daemon.paths import Home

if TYPE_CHECKING:
    from daemon.settings import Settings
    from daemon.store.db import Database


class CommandError(ReverieError):
    """A command failed; the message is the one line shown to the person."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class Env:
    home: Home
    settings: Settings
    config_file: Path | None


def resolve_home(args: Any, *, create: bool = True) -> Home:
    """Resolve `--home`/`REVERIE_HOME`; create the home when new."""
    home = Home(Path(home_dir(args)).resolve())
    if create:
        try:
            home.ensure()
        except OSError as exc:
            raise CommandError(cannot_create(home, exc)) from None
    return home


def config_file(args: Any) -> Path | None:
    """The file `--config` names, if any."""
    return Path(args.config).expanduser() if getattr(args, "config", None) else None


def load_config(home: Home, cfg: Path | None) -> Settings:
    """The home's validated settings; a configuration problem ends the command (exit 2)."""
    from daemon.settings import load_settings

    try:
        return load_settings(home.root, cfg)
    except ConfigError as exc:
        raise CommandError(str(exc), code=2) from None


def resolve_env(args: Any, *, create: bool = True) -> Env:
    """Resolve `--home`/`REVERIE_HOME` and load settings; create the home when new."""
    home = resolve_home(args, create=create)
    cfg = config_file(args)
    return Env(home=home, settings=load_config(home, cfg), config_file=cfg)


def cannot_create(home: Home, exc: OSError) -> str:
    """One line for a home that cannot be created or completed, naming the path that failed."""
    where = f"{exc.filename}: " if exc.filename and Path(exc.filename) != home.root else ""
    return f"cannot create home {home.root}: {where}{exc.strerror or exc}"


def unwritable(root: Path) -> str | None:
    """Say why the home at `root` cannot be written (a read-only mount, permissions), or None."""
    try:
        flags = os.statvfs(root).f_flag
    except OSError:
        return None
    if flags & os.ST_RDONLY:
        return f"the home {root} is on a read-only file system"
    if not os.access(root, os.W_OK):
        return f"the home {root} is not writable by uid {os.geteuid()}"
    return None


def single_cause(exc: BaseException) -> BaseException:
    """Unwrap exception groups holding exactly one exception (task groups wrap errors)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def environment_failure(exc: BaseException, home: Path | None) -> str | None:
    """One line for a failure of the machine rather than of the program, or None.

    A file that cannot be written or read, or a database that cannot be opened, is something
    the person can fix: it gets a sentence (with the home's state when that explains it), not
    a traceback. Anything else is a bug and keeps its traceback.
    """
    from daemon.store.errors import is_database_error

    cause = single_cause(exc)
    if isinstance(cause, OSError):
        what = cause.strerror or str(cause)
        line = f"{what}: {cause.filename}" if cause.filename else what
    elif is_database_error(cause):
        line = f"database error: {cause}"
    else:
        return None
    reason = unwritable(home) if home is not None else None
    return f"{line} ({reason})" if reason else line


def print_err(message: str) -> None:
    print(f"reverie: {message}", file=sys.stderr)


def has_store(env: Env) -> bool:
    """Whether the home has a store to read: a PostgreSQL one ([storage] url) or its SQLite file."""
    return bool(env.settings.storage.url) or env.home.db_file.exists()


async def open_database(env: Env, *, write: bool = True) -> Database:
    """The home's database for a command run without the daemon (read-only: no migration)."""
    from daemon.store.db import Database

    try:
        return await Database.open_configured(
            env.home.db_file, env.settings, readonly=not write, migrate=write
        )
    except Exception as exc:
        raise CommandError(f"cannot open the database {env.home.db_file}: {exc}") from None


async def has_table(db: Database, name: str) -> bool:
    """Whether the database has `name` yet (a home older than the migration that adds it)."""
    from daemon.store.schema import has_table as store_has_table

    return await store_has_table(db, name)
