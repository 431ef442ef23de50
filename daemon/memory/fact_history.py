"""How a fact reads to a person: its status, its chain of values, how often it was recalled.

Shared by `reverie memory facts` and the console's Memory page, so both say the same thing
about the same fact.
"""

from __future__ import annotations

from typing import Any

from daemon.memory.fact_log import Fact, FactLog
from daemon.memory.fact_views import chain_of
from daemon.store.db import Database
from daemon.store.facts import FactsRepo

# fact id → (times recalled, when last)
Uses = dict[str, tuple[int, str | None]]


def fact_status(fact: Fact) -> str:
    """`current`, `changed: superseded by ID` or `retired: REASON`."""
    if fact.superseded_by:
        return f"changed: superseded by {fact.superseded_by}"
    if fact.retired_at is not None:
        return f"retired: {fact.reason or 'retracted'}"
    return "current"


def fact_json(fact: Fact, uses: Uses) -> dict[str, Any]:
    """One fact in the `memory facts --json` shape."""
    n, last = uses.get(fact.id, (0, None))
    return {
        "id": fact.id,
        "text": fact.text,
        "target": fact.target,
        "source": fact.source,
        "origin": fact.origin,
        "status": fact_status(fact),
        "subject": fact.subject or None,
        "attribute": fact.attribute or None,
        "value": fact.value or None,
        "valid_from": fact.valid_since.isoformat(),
        "invalid_from": fact.invalid_from.isoformat() if fact.invalid_from else None,
        "supersedes": fact.supersedes,
        "superseded_by": fact.superseded_by,
        "session": fact.session,
        "message_ids": list(fact.message_ids),
        "uses": n,
        "last_used": last,
        "pinned": fact.pin_confirmed_at is not None,
    }


async def fact_uses(db: Database) -> Uses:
    """How often each fact was recalled (none on a database from before uses were counted)."""
    try:
        rows = await FactsRepo(db).uses()
    except Exception:  # a database not yet migrated to count uses: show none
        return {}
    return {r.uid: (r.uses, r.last_used) for r in rows}


def fact_chain(log: FactLog, uid: str) -> list[Fact]:
    """The facts superseded by and superseding `uid`, oldest first."""
    return chain_of(log.facts, uid)
