"""Daemon-level commands: run and init (status, sleep and doctor have their own modules, listed here in order)."""

from __future__ import annotations

import argparse
from typing import Any

import daemon.cli.doctor as doctor
import daemon.cli.sleep as sleep
import daemon.cli.status as status
from daemon.cli.support import (
    CommandError,
    cannot_create,
    environment_failure,
    resolve_env,
    single_cause,
    unwritable,
)
from daemon.paths import PERSONA_FILES, Home, persona_problem


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "run", parents=[common], help="run the daemon in the foreground (what systemd starts)"
    )
    p.set_defaults(func=cmd_run)

    status.add_commands(sub, common)

    sleep.add_commands(sub, common)

    p = sub.add_parser("init", parents=[common], help="scaffold a home with the shipped defaults")
    p.add_argument(
        "dir", nargs="?", help="home directory (default: --home, $REVERIE_HOME or ./var)"
    )
    p.set_defaults(func=cmd_init)

    doctor.add_commands(sub, common)


def check_persona(home: Home) -> None:
    """Refuse to start with a persona file that cannot be read as text (one clear line)."""
    for name in PERSONA_FILES:
        path = home.persona_dir / name
        problem = persona_problem(path)
        if problem is not None:
            raise CommandError(f"persona file {path} {problem}", code=2)


def cmd_run(args: argparse.Namespace) -> int:
    import gc

    # Start-up builds ~110k objects that live as long as the daemon: the collector's passes
    # over them while it imports and opens find next to nothing and cost ~10% of its CPU. It
    # waits until READY, which freezes what start-up built and enables it (`daemon.app`).
    gc.disable()
    # numpy's BLAS pool is sized by OPENBLAS_NUM_THREADS, which `daemon.cli.main` set before
    # anything could import numpy; an embedder caps it again when it loads its model.
    import anyio

    from daemon.app import Daemon, HomeLocked
    from daemon.log import configure

    env = resolve_env(args)
    configure(env.settings.log.level, env.settings.log.format)
    check_persona(env.home)
    reason = unwritable(env.home.root)
    if reason is not None:
        raise CommandError(
            f"cannot run: {reason}; the daemon keeps its lock, transcripts and memory there"
        )
    daemon = Daemon(env.home, env.settings)
    try:
        return anyio.run(daemon.run)
    except BaseException as exc:
        root = single_cause(exc)
        if isinstance(root, HomeLocked):
            raise CommandError(str(root)) from None
        if isinstance(root, OSError) and root.errno == 28:
            raise CommandError(
                f"disk full: {root.filename or env.home.root}; free space and restart (nothing acknowledged was lost)"
            ) from None
        from daemon.chat.server import ChatServerError

        if isinstance(root, ChatServerError):
            raise CommandError(f"cannot run: {root}") from None
        if isinstance(root, OSError):
            raise CommandError(f"cannot run: {environment_failure(root, env.home.root)}") from None
        raise


def cmd_init(args: argparse.Namespace) -> int:
    if args.dir:
        args.home = args.dir
    env = resolve_env(args, create=False)
    if env.home.root.exists() and not env.home.root.is_dir():
        raise CommandError(f"cannot create home {env.home.root}: it exists and is not a directory")
    try:
        created = env.home.ensure()
        env.home.root.chmod(0o700)
    except OSError as exc:
        raise CommandError(cannot_create(env.home, exc)) from None
    verb = "created" if created else "already exists; missing default files were added"
    print(f"home {env.home.root} {verb}")
    print(f"  config:   {env.home.config_file}")
    print(f"  persona:  {env.home.persona_dir}/ ({', '.join(PERSONA_FILES)})")
    print(f"  topics:   {env.home.matrix_file} + {env.home.topics_dir}/")
    print(
        f"start it with: reverie run --home {env.home.root}"
        f" (or ./scripts/run-daemon.sh --home {env.home.root} in a checkout)"
    )
    return 0
