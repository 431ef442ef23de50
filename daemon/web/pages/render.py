"""What every page handler shares: the daemon's services, and rendering a page template."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from daemon.context.assembler import LAYER_ORDER
from daemon.web import svg

if TYPE_CHECKING:
    from daemon.models.ledger import DaySpend
    from daemon.services import Services
    from daemon.web.views.context import TurnRow


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def page(
    request: Request,
    name: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    canonical: str = "",
) -> Response:
    """Render `templates/pages/<name>.html` (it extends core's `base.html`).

    `canonical` is the page's own address when it answers a form posted elsewhere.
    """
    response: Response = request.app.state.templates.TemplateResponse(
        request,
        f"pages/{name}.html",
        {"page": name, "canonical": canonical or request.url.path, **context},
        status_code=status_code,
    )
    return response


def short_time(value: str | None) -> str:
    """`2026-03-02T09:00:00+00:00` → `2026-03-02 09:00` (as stored: UTC)."""
    return (value or "")[:16].replace("T", " ")


# How a kind of memory reads when there are several of it.
PLURALS = {"summary": "summaries"}


def counted(n: int, kind: str) -> str:
    """`1 fact`, `4 facts`, `2 summaries`."""
    return f"{n:,} {kind if n == 1 else PLURALS.get(kind, kind + 's')}"


def spend_bars(days: list[DaySpend]) -> Markup | None:
    """Spend per day as bars; None while every call was free (the offline model)."""
    if not any(d.cost_usd for d in days):
        return None
    return svg.bars(
        [d.day for d in days],
        [d.cost_usd for d in days],
        unit="USD",
        fmt="{:,.4f}",
        label="spend per day",
        ticks=[d.day[5:] for d in days],
    )


def layer_bars(
    turns: list[TurnRow], *, links: list[str] | None = None, chosen: int | None = None
) -> Markup | None:
    """Context tokens per turn, stacked by layer; None when there are no turns."""
    if not turns:
        return None
    return svg.stacked_bars(
        [f"{short_time(t.ts)} {t.turn_id}" for t in turns],
        {name: [t.layers.get(name, 0) for t in turns] for name in LAYER_ORDER},
        links=links,
        label="context tokens per turn by layer",
        chosen=chosen,
    )
