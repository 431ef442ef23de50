"""`/memory`: search (GET), the facts and their history, summaries and months; retract and
correct a fact (POST, CSRF-checked by the app's middleware)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from daemon.memory.relevance import FLOOR
from daemon.web.pages.render import page, services_of
from daemon.web.views import memory as view

if TYPE_CHECKING:
    from daemon.services import Services


async def _context(request: Request) -> dict[str, Any]:
    services = services_of(request)
    query = request.query_params.get("q", "")
    show_all = request.query_params.get("all") == "1"
    facts = await view.facts(services, show_all=show_all)
    return {
        "query": query,
        "results": await view.search(services, query) if query.strip() else None,
        "floor": FLOOR,
        "show_all": show_all,
        "facts": facts,
        # The facts are counted above, from the fact log as listed; the index's other kinds here.
        "kinds": {
            k: n for k, n in (await view.kinds(services)).items() if k not in ("fact", "profile")
        },
        "summaries": await view.summaries(services, kind="summary"),
        "months": await view.summaries(services, kind="month"),
        "said": "",
        "error": "",
    }


async def memory_page(request: Request) -> Response:
    return page(request, "memory", await _context(request))


async def _fact_form(
    request: Request, act: Callable[[Services, FormData], Awaitable[str]]
) -> Response:
    """Run a fact form (retract, correct) and show the page with what it did or why not."""
    form = await request.form()
    try:
        said = await act(services_of(request), form)
    except view.MemoryFormError as exc:
        return page(
            request,
            "memory",
            {**await _context(request), "error": str(exc)},
            status_code=400,
            canonical="/memory",
        )
    return page(request, "memory", {**await _context(request), "said": said}, canonical="/memory")


async def retract_fact(request: Request) -> Response:
    return await _fact_form(
        request,
        lambda services, form: view.retract(
            services, str(form.get("fact", "")), str(form.get("reason", ""))
        ),
    )


async def correct_fact(request: Request) -> Response:
    return await _fact_form(
        request,
        lambda services, form: view.correct(
            services, str(form.get("fact", "")), str(form.get("text", ""))
        ),
    )
