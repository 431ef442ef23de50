"""`/sleep`: each cycle's phases, durations and changes; WAKE.md; dream revisions as diffs with
a Revert button (POST `/sleep/revert`, CSRF-checked by the app's middleware)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from daemon.sleep.revisions import RevisionError
from daemon.web.pages.render import page, services_of
from daemon.web.views import sleep as view


async def _context(request: Request) -> dict[str, Any]:
    services = services_of(request)
    return {
        "cycles": await view.cycles(services),
        "revisions": await view.revisions(services),
        "wake": await view.wake_notes(services),
        "said": "",
        "error": "",
    }


async def sleep_page(request: Request) -> Response:
    return page(request, "sleep", await _context(request))


async def revert_revision(request: Request) -> Response:
    form = await request.form()
    try:
        said = await view.revert(services_of(request), str(form.get("revision", "")))
    except RevisionError as exc:
        return page(
            request,
            "sleep",
            {**await _context(request), "error": str(exc)},
            status_code=400,
            canonical="/sleep",
        )
    return page(request, "sleep", {**await _context(request), "said": said}, canonical="/sleep")
