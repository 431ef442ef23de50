"""The trunk's past replies and the model that wrote each: the handover letter's voice samples.

Read-only, across `messages`, `sessions` and `usage_ledger` (tables the trunk and the usage
ledger write); the letter (`daemon.context.letter`) picks its samples from these rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class PastReply:
    """One of the agent's replies in a trunk session, as stored (`ts` its ISO text)."""

    content: str
    ts: str
    turn_id: str | None
    session_id: str


@dataclass(frozen=True, kw_only=True)
class TurnModel:
    """The provider and model the usage ledger recorded for a trunk turn."""

    turn_id: str
    provider: str
    model: str


class RepliesRepo:
    """Reads of the trunk's replies and of which model answered each turn."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def trunk_replies(self, limit: int = 400) -> list[PastReply]:
        """The agent's newest `limit` replies across trunk sessions, newest first."""
        rows = await self.db.fetchall(
            "SELECT m.content, m.ts, m.turn_id, m.session_id FROM messages m "
            "JOIN sessions s ON s.id = m.session_id "
            "WHERE m.role = 'assistant' AND s.kind = 'trunk' ORDER BY m.ts DESC LIMIT ?",
            (limit,),
        )
        return [
            PastReply(
                content=str(content),
                ts=str(ts),
                turn_id=str(turn) if turn else None,
                session_id=str(session),
            )
            for content, ts, turn, session in rows
        ]

    async def trunk_models(self, turn_ids: Sequence[str]) -> list[TurnModel]:
        """The ledger's trunk rows for these turns (a turn with several calls has several)."""
        if not turn_ids:
            return []
        rows = await self.db.fetch_in(
            "SELECT turn_id, provider, model FROM usage_ledger "
            "WHERE role = 'trunk' AND turn_id IN ({})",
            list(turn_ids),
        )
        return [
            TurnModel(turn_id=str(turn), provider=str(provider), model=str(model))
            for turn, provider, model in rows
        ]
