"""`/journal`: the journal by day (`?day=YYYY-MM-DD`), and a turn's fork tree (`?turn=ID`)."""

from __future__ import annotations

from datetime import date

from starlette.requests import Request
from starlette.responses import Response

from daemon.web.pages.render import page, services_of
from daemon.web.views import journal as view


async def journal_page(request: Request) -> Response:
    services = services_of(request)
    days = await view.days(services)
    asked = request.query_params.get("day", "").strip()
    error = ""
    day: date | None = days[0] if days else None
    if asked:
        try:
            day = date.fromisoformat(asked)
        except ValueError:
            error = f"{asked!r} is not a date (YYYY-MM-DD)"
    turn = request.query_params.get("turn", "").strip()
    return page(
        request,
        "journal",
        {
            "days": days,
            "day": day,
            "entries": await view.entries(services, day) if day and not error else [],
            "turn": turn,
            "tree": await view.fork_tree(services, turn) if turn else [],
            "delegating": await view.turns_with_forks(services),
            "error": error,
        },
        status_code=400 if error else 200,
    )
