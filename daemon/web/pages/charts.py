"""`/charts`: memory growth by kind, tokens per turn by layer, spend per day, sleep per night."""

from __future__ import annotations

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from daemon.web import svg
from daemon.web.pages.render import counted, layer_bars, page, services_of, spend_bars
from daemon.web.views import charts as view
from daemon.web.views import now as now_view
from daemon.web.views.context import recent_turns

TURNS = 60
SPEND_DAYS = 30
# Below this many days a line has too few points to read: the totals are drawn as bars.
LINE_DAYS = 3


def growth_chart(days: list[str], growth: dict[str, list[int]]) -> tuple[Markup | None, str]:
    """Memory by kind over time, and a sentence saying what it holds when it is young."""
    if not days:
        return None, ""
    totals = {kind: series[-1] for kind, series in growth.items()}
    if len(days) >= LINE_DAYS:
        chart = svg.lines(
            days,
            growth,
            unit="memories",
            label="memory growth by kind",
            integer=True,
        )
        return chart, ""
    chart = svg.bars(
        list(totals),
        list(totals.values()),
        unit="memories",
        fmt="{:,.0f}",
        label="memory growth by kind",
        integer=True,
    )
    so_far = "one day so far" if len(days) == 1 else f"{len(days)} days so far"
    said = ", ".join(counted(n, kind) for kind, n in totals.items())
    return chart, f"{so_far} (since {days[0]}): {said}"


def sleep_chart(nights: list[tuple[str, float]]) -> Markup | None:
    """Time asleep per night, in seconds, minutes or hours as the longest night reads best."""
    if not nights:
        return None
    unit, per = svg.duration_unit(max(s for _, s in nights))
    return svg.bars(
        [n for n, _ in nights],
        [s / per for _, s in nights],
        unit=unit,
        fmt="{:,.1f}",
        label="sleep per night",
        ticks=[n[5:] for n, _ in nights],
    )


async def charts_page(request: Request) -> Response:
    services = services_of(request)
    growth, growth_note = growth_chart(*await view.memory_growth(services))
    turns = await recent_turns(services, limit=TURNS)
    spend = await now_view.spend_per_day(services, days=SPEND_DAYS)
    return page(
        request,
        "charts",
        {
            "growth": growth,
            "growth_note": growth_note,
            "tokens": layer_bars(turns),
            "spend": spend_bars(spend),
            "sleep": sleep_chart(await view.sleep_per_night(services)),
        },
    )
