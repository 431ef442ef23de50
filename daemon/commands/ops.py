"""The memory commands' work, run the same way by the CLI's direct path and by the daemon.

Each operation takes a memory index (or memory system) and JSON-shaped options and returns
JSON-shaped data, which `daemon.cli.memory_render` prints. The daemon runs them over its warm
index; the CLI over one it opens for the command. Same code, same hits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from daemon.commands.types import (
    FactChanged,
    FactTold,
    ImportResult,
    RecallResult,
    RememberRequest,
    RememberResult,
    SearchHit,
    fact_told,
    search_mode,
)
from daemon.memory.api import MemoryItem
from daemon.memory.embedders import EmbedderError
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose
from daemon.memory.relevance import Match

if TYPE_CHECKING:
    from pathlib import Path

    from daemon.memory.fact_told import RememberResult as Told
    from daemon.memory.system import MemorySystem
    from daemon.paths import Home

Progress = Callable[[dict[str, Any]], None]


def item_json(item: MemoryItem, match: Match | None = None) -> SearchHit:
    """Render one result in the `memory search --json` contract.

    `score` is the ranking score (it orders, its value means little); `relevance` (0–100)
    says how well the result matches the question and `below_floor` that it shares
    (almost) nothing with it (`daemon.memory.relevance`).
    """
    out: SearchHit = {
        "kind": item.kind,
        "id": item.id,
        "score": round(item.score, 6),
        "text": item.text,
        "session": item.session,
        "message_ids": list(item.message_ids),
        "ts": item.ts.isoformat() if item.ts else None,
        "title": item.title,
        "origin": item.origin,
        "source": item.source,
        "tags": list(item.tags),
    }
    if match is not None:
        out["relevance"] = match.relevance
        out["below_floor"] = match.below_floor
    return out


async def search_batch(
    index: MemoryIndex,
    queries: Sequence[str],
    *,
    now: Any,
    k: int = 10,
    mode: str = "hybrid",
    kinds: Sequence[str] | None = None,
    include_retired: bool = False,
    raw: bool = False,
) -> list[list[SearchHit]]:
    """Search each query in turn; return one list of result dicts per query, in order.

    The sub-queries of the whole batch are embedded in one call, and only when the index
    holds vectors to compare them with: a lexical search never loads the embedding model.
    A hybrid search gives the question itself (and the questions about a named person) a
    vector pass and its sub-queries BM25 alone: on both recall sets that found the same
    evidence as a vector pass for every sub-query (`bench.recall_quality`), for one encode
    and one pass over the vectors instead of three or four.
    """
    checked = search_mode(mode, k)
    await index.refresh()
    plans = [decompose(q, now=now) for q in queries]
    vector_queries = 1 if mode == "hybrid" else None
    if mode != "lexical" and index.embedder.dim > 0 and index.matrix.vector_count > 0:
        texts = [[p.text] if raw else p.vector_queries(vector_queries) for p in plans]
        await index.query_vectors([q for t in texts for q in t if q])
    out: list[list[SearchHit]] = []
    for query, plan in zip(queries, plans, strict=True):
        results: list[MemoryItem]
        if not query.strip():
            results = []
        elif raw:
            results = await index.search(
                query, k=k, kinds=kinds, mode=checked, include_retired=include_retired
            )
        else:
            results = await index.search_plan(
                plan,
                k=k,
                mode=checked,
                kinds=kinds,
                include_retired=include_retired,
                vector_queries=vector_queries,
            )
        # Rated, never re-ranked nor dropped: the order and the items are the search's.
        matches = await index.searcher.matches(plan.text, results, by_meaning=mode != "lexical")
        out.append([item_json(r, m) for r, m in zip(results, matches, strict=True)])
    return out


async def import_transcripts(
    path: Path,
    *,
    home: Home,
    index: MemoryIndex,
    embed: bool = True,
    progress: Progress | None = None,
    summarise: Callable[[tuple[str, ...]], Any] | None = None,
) -> ImportResult:
    """Import a JSONL file, embed what is new in batches across all its sessions, return the counts.

    Raises `TranscriptError` (nothing written) on a bad line. Texts whose content hash already
    has a vector are never embedded again; an embedder failure leaves the vectors to the
    background task and says so in the counts.
    """
    # The importer (and the transcripts' repository under it) is imported by the first import.
    from daemon.memory.importer import import_file

    started = time.perf_counter()
    result = await import_file(path, home=home, index=index, progress=progress)
    if embed and index.embedder.dim > 0:
        try:
            await index.flush(progress=progress)
            embedded = index.embedder.name
        except EmbedderError as exc:
            embedded = f"failed ({exc}); the daemon will retry"
    elif index.embedder.dim == 0:
        embedded = "none (lexical only)"
    else:
        embedded = "deferred"
    summaries = 0
    if summarise is not None and result.session_ids:
        summaries = await summarise(result.session_ids)
    return {
        "sessions": result.sessions,
        "messages": result.messages,
        "already_present": result.already_present,
        "chunks": result.chunks,
        "summaries": summaries,
        "embeddings": embedded,
        "seconds": round(time.perf_counter() - started, 2),
    }


async def summarise_sessions(
    memory: MemorySystem, session_ids: Sequence[str], progress: Progress | None = None
) -> int:
    """Summarise each session now (calls the summariser model); return how many got a file."""
    done = 0
    for i, sid in enumerate(session_ids, 1):
        if await memory.summarise_session(sid, wait=True) is not None:
            done += 1
        if progress is not None:
            progress({"phase": "summarise", "done": i, "total": len(session_ids)})
    return done


async def remember(memory: MemorySystem, request: RememberRequest) -> RememberResult:
    """Store, correct, retract, restore or pin a fact as the person (raises `FactError` when refused)."""
    text = request.text
    if request.retract is not None:
        retract = request.retract
        reason = request.reason or "retracted by the person"
        if retract.startswith("shared:"):
            from daemon.memory.shared import retract_shared

            return fact_told(await retract_shared(memory.index, retract, reason=reason))
        await memory.retract(retract, reason=reason, origin="person")
        return {"status": "retracted", "id": retract, "message": f"{retract} retracted"}
    if request.restore is not None:
        fact = await memory.facts.restore(
            request.restore, origin="person", reason="restored by the person"
        )
        return {"status": "restored", "id": fact.id, "message": f"{fact.id} restored: {fact.text}"}
    if request.pin is not None:
        return await pin_fact(memory, request.pin)
    correct = request.correct
    if correct is not None and correct.startswith("shared:"):
        from daemon.memory.shared import correct_shared

        return fact_told(await correct_shared(memory.index, correct, text, origin="person"))
    if correct is not None:
        return _told(await memory.correct(correct, text, origin="person"))
    if request.shared:
        from daemon.memory.shared import share_fact

        return fact_told(await share_fact(memory.index, text, origin="person", tags=request.tags))
    return _told(
        await memory.remember(text, target=request.target, origin="person", tags=list(request.tags))
    )


def _told(result: Told) -> FactTold:
    """The memory system's answer to a told fact, as `remember` replies it."""
    return {
        "status": result.status,
        "id": result.id,
        "text": result.text,
        "message": result.message,
        "similar_to": result.similar_to,
    }


async def pin_fact(memory: MemorySystem, uid: str) -> FactChanged:
    """The person confirms pinning fact `uid`: record it, and rewrite FACTS.md's block now."""
    from daemon.sleep.maintenance import sync_pins

    fact = await memory.facts.pin(uid, origin="person")
    await sync_pins(
        memory.facts,
        db=memory.db,
        home=memory.home,
        settings=memory.settings,
        clock=memory.clock,
        score=False,
    )
    return {
        "status": "pinned",
        "id": fact.id,
        "message": f"{fact.id} pinned in FACTS.md: {fact.text}",
    }


async def recall(memory: MemorySystem, query: str) -> RecallResult:
    """Run the recall tool as the agent sees it; the result's JSON with the rendered answer as `text`."""
    result = await memory.recall_result(query)
    data = result.to_json()
    return {
        "query": data["query"],
        "answer": data["answer"],
        "planner": data["planner"],
        "synthesised": data["synthesised"],
        "sources": data["sources"],
        "text": result.render(memory.settings.memory.recall_max_bytes),
    }
