"""The `turn_reports` table's writes: what filled each trunk turn's context, per layer.

The trunk writes one row per answered turn that carried a report; the console reads them
(`daemon.store.console.ConsoleQueries`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.store.db import Database


@dataclass(frozen=True, kw_only=True)
class TurnReport:
    """One turn's context report, as the trunk records it."""

    turn_id: str
    session_id: str
    ts: str  # ISO time the turn was answered
    context_tokens: int
    report: Mapping[str, Any]  # the breakdown per layer, stored as JSON


class TurnReportsRepo:
    """Writes of the `turn_reports` table."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, report: TurnReport) -> bool:
        """Store the turn's report (a turn reported again replaces its row); False when the
        PostgreSQL server was away and the row was queued in the home (daemon.store.outage)."""
        return await self.db.write(
            "INSERT INTO turn_reports(turn_id, session_id, ts, context_tokens, report)"
            " VALUES (?,?,?,?,?) ON CONFLICT(turn_id) DO UPDATE SET"
            " session_id = excluded.session_id, ts = excluded.ts,"
            " context_tokens = excluded.context_tokens, report = excluded.report",
            (
                report.turn_id,
                report.session_id,
                report.ts,
                report.context_tokens,
                json.dumps(dict(report.report)),
            ),
        )
