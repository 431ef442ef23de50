"""`/charts`: memory growth by kind, tokens per turn by layer, spend per day, sleep per night."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from daemon.web import svg
from daemon.web.pages.render import layer_bars, page, services_of, spend_bars
from daemon.web.views import charts as view
from daemon.web.views import now as now_view
from daemon.web.views.context import recent_turns

TURNS = 60
SPEND_DAYS = 30


async def charts_page(request: Request) -> Response:
    services = services_of(request)
    days, growth = await view.memory_growth(services)
    turns = await recent_turns(services, limit=TURNS)
    spend = await now_view.spend_per_day(services, days=SPEND_DAYS)
    nights = await view.sleep_per_night(services)
    return page(
        request,
        "charts",
        {
            "growth": svg.lines(days, growth, unit="memories", label="memory growth by kind")
            if days
            else None,
            "tokens": layer_bars(turns),
            "spend": spend_bars(spend),
            "sleep": svg.bars(
                [n for n, _ in nights],
                [m for _, m in nights],
                unit="minutes",
                fmt="{:,.1f}",
                label="sleep per night",
            )
            if nights
            else None,
        },
    )
