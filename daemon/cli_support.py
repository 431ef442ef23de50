"""Shared plumbing for `reverie` subcommands: home and settings resolution, clean failure.

Each system contributes its subcommands with `add_commands(subparsers)`; a subcommand's
`func(args)` returns an exit code (or a coroutine returning one). Anything wrong ends as one
line on stderr and a non-zero exit — never a traceback.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.paths import Home, default_home
from daemon.settings import ConfigError, Settings, load_settings


class CommandError(Exception):
    """A command failed; the message is the one line shown to the person."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, kw_only=True)
class Env:
    home: Home
    settings: Settings
    config_file: Path | None


def resolve_env(args: Any, *, create: bool = True) -> Env:
    """Resolve `--home`/`REVERIE_HOME` and load settings; create the home when new."""
    root = Path(args.home).expanduser() if getattr(args, "home", None) else default_home()
    home = Home(root.resolve())
    if create:
        try:
            home.ensure()
        except OSError as exc:
            raise CommandError(f"cannot create home {home.root}: {exc.strerror or exc}") from None
    cfg = Path(args.config).expanduser() if getattr(args, "config", None) else None
    try:
        settings = load_settings(home.root, cfg)
    except ConfigError as exc:
        raise CommandError(str(exc), code=2) from None
    return Env(home=home, settings=settings, config_file=cfg)


def print_err(message: str) -> None:
    print(f"reverie: {message}", file=sys.stderr)
