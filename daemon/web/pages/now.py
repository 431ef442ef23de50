"""`/`: the state and phase, the timeline of the last days, spend today and per day."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from daemon.sleep.exam_record import exam_status
from daemon.web import svg
from daemon.web.pages.render import page, services_of, spend_bars
from daemon.web.views import now as view

TIMELINE_DAYS = 3
# `?days=N` zooms the timeline out (or in) within these bounds.
DAYS_RANGE = range(1, 31)


def _link(kind: str, ref: str) -> str:
    """Where a mark on the timeline leads: a turn's context, a fork's turn, a sleep cycle."""
    if kind == "turn":
        return f"/context?turn={quote(ref)}"
    if kind == "fork":
        return f"/journal?turn={quote(ref)}"
    if kind == "sleep":
        return f"/sleep#{quote(ref)}"
    return ""


async def now_page(request: Request) -> Response:
    services = services_of(request)
    asked = request.query_params.get("days", "")
    days_shown = int(asked) if asked.isdigit() and int(asked) in DAYS_RANGE else TIMELINE_DAYS
    timeline = await view.timeline(services, days=days_shown)
    spend = await view.spend(services)
    # The continuity self-exam over the last nights (None before the first sleep).
    exam = await exam_status(services.db)
    return page(
        request,
        "now",
        {
            "state": view.state(services),
            "timeline_svg": svg.timeline(timeline, link=_link),
            "timeline": timeline,
            "days": days_shown,
            "zoom": [n for n in (1, 3, 7, 14, 30) if n != days_shown],
            "spend": spend,
            "spend_svg": spend_bars(spend["days"]),
            "exam": exam,
        },
    )
