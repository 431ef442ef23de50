"""`/context`: the last turns' context by layer; `?turn=ID` explains one turn."""

from __future__ import annotations

from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response

from daemon.context.assembler import LAYER_ORDER
from daemon.web import svg
from daemon.web.pages.render import layer_bars, page, services_of
from daemon.web.views import context as view

TURNS_SHOWN = 30
# The legend's colour per layer, as the chart stacks them.
LAYER_COLOURS = {name: svg.colour(i) for i, name in enumerate(LAYER_ORDER)}


async def context_page(request: Request) -> Response:
    services = services_of(request)
    turns = await view.recent_turns(services, limit=TURNS_SHOWN)
    chosen = request.query_params.get("turn", "").strip()
    detail = await view.turn_detail(services, chosen) if chosen else None
    status = 404 if chosen and detail is None else 200
    chart = layer_bars(
        turns,
        links=[f"/context?turn={quote(t.turn_id)}" for t in turns],
        chosen=next((i for i, t in enumerate(turns) if t.turn_id == chosen), None),
    )
    return page(
        request,
        "context",
        {
            "turns": list(reversed(turns)),
            "chart": chart,
            "chosen": chosen,
            "detail": detail,
            "missing": chosen if status == 404 else "",
            "layer_colours": LAYER_COLOURS,
        },
        status_code=status,
    )
