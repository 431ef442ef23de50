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
    "daemon.app_commands",
    "daemon.chat.commands",
    "daemon.commands.memory_cli",
    "daemon.commands.recall_cli",
    "daemon.context.commands",
    "daemon.sleep.dream_commands",
    "daemon.journal.commands",
)

# Commands whose module is known: only it is imported, so `reverie memory search` on the
# direct path does not pay for the chat client and the context assembler.
COMMAND_OWNERS = {
    "memory": "daemon.commands.memory_cli",
    "remember": "daemon.commands.recall_cli",
    "recall": "daemon.commands.recall_cli",
    "journal": "daemon.journal.commands",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    import argparse
    import importlib

    home_help = "state directory (default: $REVERIE_HOME, $STATE_DIRECTORY or ./var)"
    config_help = "extra TOML config layered over the home's reverie.toml"
    parser = argparse.ArgumentParser(
        prog="reverie", description="Reverie: a 24/7 agent daemon built for continuity."
    )
    parser.add_argument("--home", metavar="DIR", help=home_help)
    parser.add_argument("--config", metavar="FILE", help=config_help)
    # Subcommands accept the same options after their name; SUPPRESS keeps a value given
    # before the subcommand from being overwritten by the subparser's default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", metavar="DIR", default=argparse.SUPPRESS, help=home_help)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=config_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from daemon.commands.forward import command_word

    owner = COMMAND_OWNERS.get(command_word(argv) or "") if argv is not None else None
    for name in (owner,) if owner else COMMAND_MODULES:
        module = importlib.import_module(name)
        module.add_commands(sub, common)
    return parser


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


def _blas_threads() -> None:
    """Give numpy's BLAS half the usable cores (at least one) unless the environment says otherwise.

    Must run before numpy is imported. OpenBLAS's spinning worker threads fight each other and
    SQLite on a small shared machine: on 2 busy cores one thread embedded 5x more texts a
    second with the numpy MiniLM (201/s against 41/s) and a query took 15 ms against 280 ms.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(max(1, min(4, cores // 2))))


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
    _blas_threads()
    # Memory commands a running daemon can answer go there before anything heavy is imported.
    from daemon.commands.forward import forward

    try:
        forwarded = forward(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt:
        return 130
    if forwarded is not None:
        if argv is None:
            _exit_now(forwarded)
        return forwarded
    from daemon.cli_support import CommandError, print_err

    parser = build_parser(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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

    from daemon.cli_support import environment_failure, print_err
    from daemon.paths import default_home
    from daemon.store.errors import free_bytes, storage_failure

    home = Path(args.home).expanduser() if getattr(args, "home", None) else default_home()
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


if __name__ == "__main__":
    sys.exit(main())
