"""The memory commands as socket commands, answered by the running daemon's warm memory.

`reverie memory search | import`, `remember` and `recall` reach these through the socket when
a daemon runs (see `daemon.cli.forward`): the embedding model is loaded and the vector
matrix is in memory, so a search costs the search. The work is `daemon.commands.ops`, the
same the CLI runs on its own when no daemon listens. Each is registered with its request class
(`daemon.commands.types`): bad arguments are refused before the handler runs. A refusal found
while answering (a bad line in an import, an unknown fact id) raises `ValueError`, which the
gateway answers as `bad_args` with the message.

`memory_import` takes the file itself, passed open with the command (`SCM_RIGHTS`), never a
path: the daemon reads what its client could open, so a client (another uid in
`chat.allow_uids`) cannot make the daemon open files only the daemon may read.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from daemon.agent.gateway import command_progress
from daemon.chat.server import take_passed_file
from daemon.commands import ops
from daemon.commands.types import (
    ImportResult,
    MemoryImportRequest,
    MemorySearchRequest,
    MemorySearchResult,
    RecallRequest,
    RecallResult,
    RememberRequest,
    RememberResult,
)
from daemon.log import get_logger
from daemon.memory.fact_log import FactError
from daemon.memory.transcript_windows import RecallError
from daemon.memory.transcripts import TranscriptError

if TYPE_CHECKING:
    from daemon.agent.gateway import ChatGateway
    from daemon.clock import Clock
    from daemon.memory.system import MemorySystem

log = get_logger("commands")


COPY_CHUNK_BYTES = 1 << 20
NO_FILE = (
    "memory_import needs the file itself, passed open with the command (SCM_RIGHTS, "
    "'files': 1); the daemon does not open paths for its clients. "
    "`reverie memory import FILE` does this"
)


def _copy_passed(fd: int, target: Path) -> None:
    """Copy the passed file to `target` from its start, whatever the client did with its offset."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise ValueError("memory_import needs a regular file")
    offset = 0
    with target.open("wb") as out:
        while chunk := os.pread(fd, COPY_CHUNK_BYTES, offset):
            out.write(chunk)
            offset += len(chunk)


def register_memory_commands(gateway: ChatGateway, memory: MemorySystem, clock: Clock) -> None:
    """Answer `memory_search`, `memory_import`, `remember` and `recall` on `gateway`."""

    async def memory_search(request: MemorySearchRequest) -> MemorySearchResult:
        results = await ops.search_batch(
            memory.index,
            request.queries,
            now=clock.now(),
            k=request.k,
            mode=request.mode,
            kinds=request.kinds,
            include_retired=request.include_retired,
            raw=request.raw,
        )
        return {"results": results}

    async def memory_import(request: MemoryImportRequest) -> ImportResult:
        fd = take_passed_file()
        if fd is None:
            raise ValueError(NO_FILE)
        name = request.name
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
                counts = await _import(copy, request)
        finally:
            if fd >= 0:
                os.close(fd)
        log.info(
            "memory import done",
            file=name,
            **{k: v for k, v in counts.items() if k != "embeddings"},
        )
        return counts

    async def _import(path: Path, request: MemoryImportRequest) -> ImportResult:
        async def summarise(ids: tuple[str, ...]) -> int:
            return await ops.summarise_sessions(memory, ids, command_progress)

        try:
            return await ops.import_transcripts(
                path,
                home=memory.home,
                index=memory.index,
                embed=not request.no_embed,
                progress=command_progress,
                summarise=summarise if request.summarise else None,
            )
        except TranscriptError as exc:
            raise ValueError(f"import stopped, nothing written: {exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path.name} is not UTF-8 text") from None

    async def remember(request: RememberRequest) -> RememberResult:
        try:
            return await ops.remember(memory, request)
        except FactError as exc:
            raise ValueError(str(exc)) from None

    async def recall(request: RecallRequest) -> RecallResult:
        try:
            return await ops.recall(memory, request.query)
        except RecallError as exc:
            raise ValueError(str(exc)) from None

    gateway.command("memory_search", MemorySearchRequest, memory_search)
    gateway.command("memory_import", MemoryImportRequest, memory_import)
    gateway.command("remember", RememberRequest, remember)
    gateway.command("recall", RecallRequest, recall)
