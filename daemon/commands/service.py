"""The memory commands as socket commands, answered by the running daemon's warm memory.

`reverie memory search | import`, `remember` and `recall` reach these through the socket when
a daemon runs (see `daemon.commands.forward`): the embedding model is loaded and the vector
matrix is in memory, so a search costs the search. The work is `daemon.commands.ops`, the
same the CLI runs on its own when no daemon listens. A refusal (a bad line in an import, an
unknown fact id) raises `ValueError`, which the gateway answers as `bad_args` with the message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from daemon.agent.gateway import command_progress
from daemon.clock import Clock
from daemon.commands import ops
from daemon.commands.args import BATCH_QUERIES
from daemon.log import get_logger
from daemon.memory.facts import FactError
from daemon.memory.recall import RecallError
from daemon.memory.transcripts import TranscriptError

if TYPE_CHECKING:
    from daemon.memory.system import MemorySystem

log = get_logger("commands")

Command = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


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
        raw = args.get("path")
        if not isinstance(raw, str) or not raw:
            raise ValueError("memory_import needs 'path': the JSONL file to import")
        path = Path(raw)
        if not path.is_absolute():
            raise ValueError(
                "memory_import needs an absolute 'path' (the daemon's directory is not yours)"
            )
        if not await anyio.Path(path).is_file():
            raise ValueError(f"no such file: {path}")

        async def summarise(ids: tuple[str, ...]) -> int:
            return await ops.summarise_sessions(memory, ids, command_progress)

        try:
            counts = await ops.import_transcripts(
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
            raise ValueError(f"{path} is not UTF-8 text") from None
        except PermissionError as exc:
            raise ValueError(f"the daemon cannot read {path}: {exc.strerror or exc}") from None
        log.info(
            "memory import done",
            path=str(path),
            **{k: v for k, v in counts.items() if k != "embeddings"},
        )
        return counts

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
