"""The Memory page: search, the facts with their history, summaries and months; retract and correct.

Search is `reverie memory search`'s (`ops.search_batch` over the daemon's warm index); the
facts are `reverie memory facts`'s (`daemon.memory.fact_history`); a retraction or a
correction is `reverie remember --retract/--correct`'s (`ops.remember`, as the person):
appended to the fact log, never an edit of what was there.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from daemon.commands import ops
from daemon.commands.types import RememberRequest, RememberResult, SearchHit
from daemon.errors import ReverieError
from daemon.memory.fact_history import fact_chain, fact_json, fact_status, fact_uses
from daemon.memory.facts import FactError
from daemon.memory.ids import fact_uid
from daemon.store.console import ConsoleQueries

if TYPE_CHECKING:
    from daemon.services import Services

SEARCH_K = 20
# Facts listed on the page, newest first (search finds any of them).
FACTS_SHOWN = 300
# The longest query or fact text the page accepts (a form field, not a document).
MAX_TEXT = 2000


class MemoryFormError(ReverieError, ValueError):
    """A retraction or correction the memory refused, or a form that does not make one."""


async def search(services: Services, query: str, *, k: int = SEARCH_K) -> list[SearchHit]:
    """Ranked memories for `query`, as `reverie memory search --json` gives them."""
    query = " ".join(query.split())[:MAX_TEXT]
    if not query:
        return []
    results = await ops.search_batch(services.memory.index, [query], now=services.clock.now(), k=k)
    return results[0]


@dataclass(frozen=True, kw_only=True)
class FactList:
    """The facts the page lists, and counts of the same facts its header shows."""

    rows: list[dict[str, Any]]  # the newest `limit`, newest first
    total: int
    targets: dict[str, int]  # memory / profile → how many
    statuses: dict[str, int]  # current / changed / retired → how many


async def facts(
    services: Services, *, show_all: bool = False, limit: int = FACTS_SHOWN
) -> FactList:
    """The newest `limit` facts (with `show_all`, also those no longer current), each with its
    chain of values when it has one; and how many there are in all, by target and status."""
    store = services.memory.facts
    await store.load()
    uses = await fact_uses(services.db)
    chosen = store.facts(include_retired=show_all)
    out = []
    for fact in reversed(chosen[-limit:]):
        data = fact_json(fact, uses)
        chain = fact_chain(store.log, fact.id)
        data["history"] = [fact_json(f, uses) for f in chain] if len(chain) > 1 else []
        out.append(data)
    return FactList(
        rows=out,
        total=len(chosen),
        targets=dict(Counter(f.target for f in chosen)),
        statuses=dict(Counter(fact_status(f).split(":")[0] for f in chosen)),
    )


async def kinds(services: Services) -> dict[str, int]:
    """How many memories of each kind the index holds, as `reverie memory stats` counts them
    (retired ones too: counted from the kind index alone, a few ms at 100k memories)."""
    return await ConsoleQueries(services.db).memory_kinds()


async def summaries(services: Services, *, kind: str, limit: int = 12) -> list[dict[str, Any]]:
    """The newest session summaries (`summary`) or monthly summaries (`month`)."""
    rows = await ConsoleQueries(services.db).newest_memories(kind, limit)
    return [
        {
            "id": r.uid,
            "title": r.title,
            "text": r.text,
            "created_at": r.created_at,
            "source": r.source,
        }
        for r in rows
    ]


async def retract(services: Services, fact_id: str, reason: str) -> str:
    """Retract a fact as the person; the message to show. Raises `MemoryFormError`."""
    fact_id = fact_uid(fact_id)
    if not fact_id:
        raise MemoryFormError("which fact? the form named none")
    request = {"retract": fact_id, "reason": " ".join(reason.split())[:MAX_TEXT]}
    return str((await _remember(services, request))["message"])


async def correct(services: Services, fact_id: str, text: str) -> str:
    """Correct a fact as the person (the new value supersedes it); the message to show."""
    fact_id, text = fact_uid(fact_id), " ".join(text.split())
    if not fact_id:
        raise MemoryFormError("which fact? the form named none")
    if not text:
        raise MemoryFormError("a correction needs the new text")
    if len(text) > MAX_TEXT:
        raise MemoryFormError(f"a fact is at most {MAX_TEXT} characters")
    return str((await _remember(services, {"text": text, "correct": fact_id}))["message"])


async def _remember(services: Services, request: dict[str, Any]) -> RememberResult:
    # As the daemon answers `reverie remember` (its index embeds in the background).
    try:
        return await ops.remember(services.memory, RememberRequest.from_args(request))
    except (FactError, ValueError) as exc:
        raise MemoryFormError(str(exc)) from None
