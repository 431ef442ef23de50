"""When a fact about a dated plan has passed: the rule nightly maintenance retires by."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any

from daemon.memory.mining import recurring_days

_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


def past_plan(
    text: str, stated_at: datetime, *, today: date, tz: Any, grace_days: int
) -> date | None:
    """The last date of a plan `text` states, when it passed `grace_days` before `today`; else None.

    One rule for an agent's own facts (`daemon.sleep.maintenance`) and the shared ones
    (`daemon.sleep.shared_upkeep`).
    """
    if recurring_days(text):
        return None  # "the gym moves to Saturday (…)": a day of every week, never a past plan
    dates: list[date] = []
    for raw in _DATE.findall(text):
        try:
            dates.append(date.fromisoformat(raw))
        except ValueError:
            continue
    if not dates:
        return None
    last = max(dates)
    stated = stated_at.astimezone(tz).date()
    if last < stated:
        return None  # a past event when it was told ("born on …"): history, not a plan
    return last if last + timedelta(days=grace_days) < today else None
