"""The memory commands as socket commands, answered by the running daemon's warm memory.

`reverie memory search | import`, `remember` and `recall` reach these through the socket when
a daemon runs (see `daemon.cli.forward`): the embedding model is loaded and the vector
matrix is in memory, so a search costs the search. The work is `daemon.commands.ops`, the
same the CLI runs on its own when no daemon listens. A refusal (a bad line in an import, an
unknown fact id) raises `ValueError`, which the gateway answers as `bad_args` with the message.

`memory_import` takes the file itself, passed open with the command (`SCM_RIGHTS`), never a
path: the daemon reads what its client could open, so a client (another uid in
`chat.allow_uids`) cannot make the daemon open files only the daemon may read.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from daemon.agent.gateway import Command, command_progress
from daemon.chat.server import take_passed_file
from daemon.clock import Clock
from daemon.commands import BATCH_QUERIES, ops
from daemon.log import get_logger
from daemon.memory.facts import FactError
from daemon.memory.recall import RecallError
from daemon.memory.transcripts import TranscriptError

if TYPE_CHECKING:
    from daemon.memory.system import MemorySystem

log = get_logger("commands")


COPY_CHUNK_BYTES = 1 << 20
NO_FILE = (
    "memory_import needs the file itself, passed open with the command (SCM_RIGHTS, "
    "'files': 1); the daemon does not open paths for its clients. "
    "`reverie memory import FILE` does this"
)


def _import_name(raw: Any) -> str:
    """The passed file's name as the import reports it: a bare file name, never a path."""
    name = os.path.basename(raw) if isinstance(raw, str) else ""
    try:
        size = len(name.encode())
    except UnicodeEncodeError:  # a lone surrogate from the wire
        size = 0
    if name in (".", "..") or not 0 < size <= 255 or not name.isprintable():
        return "import.jsonl"
    return name


def _copy_passed(fd: int, target: Path) -> None:
    """Copy the passed file to `target` from its start, whatever the client did with its offset."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise ValueError("memory_import needs a regular file")
    offset = 0
    with target.open("wb") as out:
        while chunk := os.pread(fd, COPY_CHUNK_BYTES, offset):
            out.write(chunk)
            offset += len(chunk)


def memory_commands(memory: MemorySystem, clock: Clock) -> dict[str, Command]:
    """The socket commands `memory_search`, `memory_import`, `remember` and `recall`."""

    async def memory_search(args: dict[str, Any]) -> dict[str, Any]:
        queries = args.get("queries")
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise ValueError("memory_search needs 'queries': a list of strings")
        if len(queries) > BATCH_QUERIES:
            raise ValueError(f"memory_search takes at most {BATCH_QUERIES} queries per command")
        kinds = args.get("kinds")
        results = await ops.search_batch(
            memory.index,
            queries,
            now=clock.now(),
            k=int(args.get("k", 10)),
            mode=str(args.get("mode", "hybrid")),
            kinds=[str(k) for k in kinds] if kinds else None,
            include_retired=bool(args.get("include_retired")),
            raw=bool(args.get("raw")),
        )
        return {"results": results}

    async def memory_import(args: dict[str, Any]) -> dict[str, Any]:
        fd = take_passed_file()
        if fd is None:
            raise ValueError(NO_FILE)
        name = _import_name(args.get("name"))
        try:
            # A private snapshot: the import reads a file that cannot change under it, by the
            # name the person gave it (errors and session names use it).
            memory.home.cache_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix="import-", dir=memory.home.cache_dir) as tmp:
                copy = Path(tmp) / name
                try:
                    await anyio.to_thread.run_sync(_copy_passed, fd, copy)
                except OSError as exc:
                    raise ValueError(f"cannot import {name}: {exc.strerror or exc}") from None
                os.close(fd)
                fd = -1
                counts = await _import(copy, args)
        finally:
            if fd >= 0:
                os.close(fd)
        log.info(
            "memory import done",
            file=name,
            **{k: v for k, v in counts.items() if k != "embeddings"},
        )
        return counts

    async def _import(path: Path, args: dict[str, Any]) -> dict[str, Any]:
        async def summarise(ids: tuple[str, ...]) -> int:
            return await ops.summarise_sessions(memory, ids, command_progress)

        try:
            return await ops.import_transcripts(
                path,
                home=memory.home,
                index=memory.index,
                embed=not args.get("no_embed"),
                progress=command_progress,
                summarise=summarise if args.get("summarise") else None,
            )
        except TranscriptError as exc:
            raise ValueError(f"import stopped, nothing written: {exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path.name} is not UTF-8 text") from None

    async def remember(args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await ops.remember(memory, args)
        except FactError as exc:
            raise ValueError(str(exc)) from None

    async def recall(args: dict[str, Any]) -> dict[str, Any]:
        query = str(args.get("query", "")).strip()
        if not query:
            raise ValueError("recall needs a non-empty 'query'")
        try:
            return await ops.recall(memory, query)
        except RecallError as exc:
            raise ValueError(str(exc)) from None

    return {
        "memory_search": memory_search,
        "memory_import": memory_import,
        "remember": remember,
        "recall": recall,
    }
