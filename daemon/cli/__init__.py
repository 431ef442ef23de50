"""`reverie` — the command line. Each system adds its own subcommands; this module dispatches.

Every command takes `--home DIR` (or `REVERIE_HOME`) and exits non-zero with one clear
line on stderr when something is wrong.
"""

from __future__ import annotations

import os
import sys

# `typing` costs ~2 ms of a ~40 ms forwarded command, `argparse` ~5 ms: a forwarded command
# imports neither (the full CLI imports argparse when it builds its parser).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

# Modules that contribute subcommands through `add_commands(subparsers, common)`.
COMMAND_MODULES = (
    "daemon.cli.home",
    "daemon.cli.chat",
    "daemon.cli.memory",
    "daemon.cli.context",
    "daemon.cli.dreams",
    "daemon.cli.exam",
    "daemon.cli.handover",
    "daemon.cli.journal",
    "daemon.cli.notices",
    "daemon.cli.permissions",
    "daemon.cli.schedule",
    "daemon.cli.web",
)

# Commands whose module is known: only it is imported, so `reverie memory search` on the
# direct path does not pay for the chat client and the context assembler.
COMMAND_OWNERS = {
    "memory": "daemon.cli.memory",
    "remember": "daemon.cli.memory",
    "recall": "daemon.cli.memory",
    "journal": "daemon.cli.journal",
    "exam": "daemon.cli.exam",
    "handover": "daemon.cli.handover",
    "notices": "daemon.cli.notices",
    "permissions": "daemon.cli.permissions",
    "schedule": "daemon.cli.schedule",
    "status": "daemon.cli.status",
    "run": "daemon.cli.home",
    "web": "daemon.cli.web",
}


def command_word(argv: list[str]) -> str | None:
    """The subcommand named on the line (skipping `--home X`/`--config X` before it)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--home", "--config"):
            skip = True
        elif not token.startswith("-"):
            return token
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    import argparse
    import importlib

    home_help = "state directory (default: $REVERIE_HOME, $STATE_DIRECTORY or ./var)"
    config_help = "extra TOML config layered over the home's reverie.toml"
    parser = argparse.ArgumentParser(
        prog="reverie", description="Reverie: a 24/7 agent daemon built for continuity."
    )
    parser.add_argument(
        "--version", action=_version_action(), nargs=0, help="print the version and exit"
    )
    parser.add_argument("--home", metavar="DIR", help=home_help)
    parser.add_argument("--config", metavar="FILE", help=config_help)
    # Subcommands accept the same options after their name; SUPPRESS keeps a value given
    # before the subcommand from being overwritten by the subparser's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", metavar="DIR", default=argparse.SUPPRESS, help=home_help)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=config_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    owner = COMMAND_OWNERS.get(command_word(argv) or "") if argv is not None else None
    for name in (owner,) if owner else COMMAND_MODULES:
        module = importlib.import_module(name)
        module.add_commands(sub, common)
    return parser


def version() -> str:
    """The installed package's version (`reverie X.Y.Z`), read from its metadata."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return f"reverie {dist_version('reverie')}"
    except PackageNotFoundError:
        return "reverie (version unknown: the package is not installed)"


def _version_action() -> type[argparse.Action]:
    """`--version`, whose answer is looked up only when asked (the metadata costs ~10 ms)."""
    import argparse

    class Version(argparse.Action):
        def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
            print(version())
            parser.exit()

    return Version


def _run(func: Any, args: argparse.Namespace) -> int:
    import asyncio
    import inspect

    result = func(args)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return int(result or 0)


def _reader_gone() -> int:
    """Exit quietly once stdout's reader has gone: stdout now points at /dev/null, so the flush
    at interpreter exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def _exit_now(code: int) -> None:
    """End a forwarded command at once: its output is written, nothing else is left to do.

    Tearing the interpreter down (module dictionaries, the garbage collector) costs ~10 ms,
    a quarter of a forwarded search; only the program itself (`argv` None) ends this way.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = _reader_gone()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    # Before numpy can be imported: OpenBLAS sizes its thread pool at import, and a pool that
    # `cap_blas_threads` (threadpoolctl) shrinks afterwards has already started its spinning
    # threads (~100 ms of CPU in a cold `memory search` on 2 cores). The environment wins.
    from daemon.memory.threads import default_threads

    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(default_threads()))
    words = sys.argv[1:] if argv is None else list(argv)
    if command_word(words) is None and "--version" in words:
        # Before the parser: the whole command line's parser imports every command's module.
        print(version())
        return 0
    parser = build_parser(words)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # Memory commands a running daemon can answer go there before anything heavy is imported.
    from daemon.cli.forward import forward

    try:
        forwarded = forward(args)
    except KeyboardInterrupt:
        return 130
    if forwarded is not None:
        if argv is None:
            _exit_now(forwarded)
        return forwarded
    from daemon.cli.support import CommandError, print_err

    # Commands other than `run` keep stdout for their output: log warnings to stderr.
    from daemon.log import configure

    configure("warning", "console", to="stderr")
    try:
        return _run(args.func, args)
    except CommandError as exc:
        print_err(str(exc))
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except BaseExceptionGroup as group:
        # A reader that stopped early (`reverie chat -m … | head -1`) is not an error to report,
        # also when the write failed inside a task group.
        pipe, rest = group.split(BrokenPipeError)
        if pipe is None or rest is not None:
            return _environment_failure(group, args)
        return _reader_gone()
    except Exception as exc:
        return _environment_failure(exc, args)


def _environment_failure(exc: BaseException, args: argparse.Namespace) -> int:
    """Report a file or database the command could not use in one line; re-raise anything else."""
    from pathlib import Path

    from daemon.cli.locate import home_dir
    from daemon.cli.support import environment_failure, print_err
    from daemon.store.errors import free_bytes, storage_failure, store_server_away

    home = Path(home_dir(args))
    server = store_server_away(exc)
    if server is not None:
        # Temporary too (EX_TEMPFAIL): under systemd the daemon is started again, and answers
        # once the server does; the home's files (transcripts, facts) are untouched meanwhile.
        print_err(
            f"the memory store's server cannot be reached ({server}); the daemon needs it to "
            "start — check the server and [storage] url, then try again"
            " — messages already accepted are kept and answered then"
        )
        return 75
    full = storage_failure(exc)
    if full is not None:
        # Temporary by nature (EX_TEMPFAIL): under systemd the daemon is started again and
        # answers what it had accepted once space is back.
        free = free_bytes(home)
        room = f", {free:,} bytes free" if free is not None else ""
        print_err(
            f"storage in {home} refuses writes ({full}{room}); free some space and try again"
            " — messages already accepted are kept and answered then"
        )
        return 75
    line = environment_failure(exc, home)
    if line is None:
        raise exc
    print_err(line)
    return 1
