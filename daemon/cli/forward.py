"""Hand `memory search | import`, `remember`, `recall` and `status` to the running daemon.

Standard library only.

`reverie` calls `forward(args)` once argparse has read the command line, before it imports
anything heavy. When the command is one of
these five and a daemon listens on the home's socket, the command is sent there (where the
embedding model and the vector matrix are warm) over the one client connection
(`daemon.chat.link`, blocking: no event loop), the reply is printed exactly as the direct
path prints it, and the exit code is returned. Otherwise — another command, no
socket, a daemon too old to know the command — it returns None and the CLI runs the command
itself over the database. A refusal by the daemon prints `reverie: <why>` and exits 1, as the
direct path does. `memory import` opens the file here, with the person's rights, and passes it
open with the command (`SCM_RIGHTS`); the daemon never opens a path a client names.
"""

from __future__ import annotations

import os
import sys

import daemon.cli.memory_args as spec
import daemon.cli.memory_render as render
from daemon.chat.link import ChatError, DaemonLink
from daemon.cli.locate import home_dir, socket_path
from daemon.commands import BATCH_QUERIES
from daemon.errors import ReverieError

# `typing` and `pathlib` cost ~10 ms of a ~50 ms forwarded command: annotations only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO

# A search whose daemon must first load the embedding model may take a few seconds.
SEARCH_TIMEOUT_S = 300.0


class _Fallback(ReverieError):
    """The daemon does not know the command; run it directly instead."""


def _answer(frame: dict[str, Any]) -> Any:
    if frame["type"] == "result":
        return frame.get("data")
    if frame.get("code") == "unknown_command":
        raise _Fallback
    raise spec.UsageError(str(frame.get("message") or "the daemon refused the command"))


def _search(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    queries = spec.search_queries(args)
    options = spec.search_options(args)
    batch = args.batch is not None
    for start in range(0, len(queries), BATCH_QUERIES):
        part = queries[start : start + BATCH_QUERIES]
        data = _answer(
            link.request("memory_search", {"queries": part, **options}, timeout=SEARCH_TIMEOUT_S)
        )
        for query, items in zip(part, data["results"], strict=True):
            render.search_results(items, as_json=args.json, batch=batch, query=query, out=out)
    return 0


def _import(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    path = spec.import_file(args)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise spec.UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    progress = render.ImportProgress(as_json=args.json, enabled=not args.no_progress)
    request = {
        "name": os.path.basename(path),
        "summarise": bool(args.summarise),
        "no_embed": bool(args.no_embed),
    }
    try:
        frame = link.request("memory_import", request, timeout=None, on_progress=progress, file=fd)
        counts = _answer(frame)
    finally:
        os.close(fd)
        progress.close()
    render.import_counts(counts, as_json=args.json, out=out)
    return 0


def _remember(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    data = _answer(link.request("remember", spec.remember_request(args), timeout=None))
    render.remember_result(data, as_json=args.json, out=out)
    return 0


def _recall(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    data = _answer(link.request("recall", {"query": spec.recall_query(args)}, timeout=None))
    render.recall_answer(data, as_json=args.json, out=out)
    return 0


def _status(link: DaemonLink, args: argparse.Namespace, out: TextIO) -> int:
    # Any trouble asking is the direct path's to handle: it asks again, then reads the store.
    try:
        frame = link.request("status", {}, timeout=10.0)
    except ChatError:
        raise _Fallback from None
    if frame["type"] != "result":
        raise _Fallback
    from daemon.cli.status import print_status

    print_status(frame.get("data") or {}, as_json=args.json, out=out)
    return 0


def forward(args: argparse.Namespace, out: TextIO | None = None) -> int | None:
    """Run a parsed memory command or `status` through the running daemon; None when the CLI
    runs it itself."""
    if args.command == "memory":
        run = {"search": _search, "import": _import}.get(args.memory_command or "")
    else:
        run = {"remember": _remember, "recall": _recall, "status": _status}.get(args.command or "")
    if run is None:
        return None
    home = os.path.realpath(home_dir(args))
    path = socket_path(home, getattr(args, "config", None))
    if path is None or not os.path.exists(path):
        return None
    try:
        link = DaemonLink.connect(path)
    except ChatError:
        return None
    stream = out or sys.stdout
    try:
        return run(link, args, stream)
    except _Fallback:
        return None
    except spec.UsageError as exc:
        print(f"reverie: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except (ChatError, OSError) as exc:
        print(f"reverie: lost the daemon mid-command ({exc}); run it again", file=sys.stderr)
        return 1
    finally:
        link.close()
