"""The console's pages: their routes and their entries in the navigation bar.

Each page is a module here (its handlers), reading through `daemon.web.views` (its data) and
rendering `templates/pages/<page>.html`; charts come from `daemon.web.svg`. Every POST is a
form carrying the CSRF token, checked by the app's guard before a handler runs.
"""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from daemon.web.pages.charts import charts_page
from daemon.web.pages.context import context_page
from daemon.web.pages.journal import journal_page
from daemon.web.pages.memory import correct_fact, memory_page, retract_fact
from daemon.web.pages.now import now_page
from daemon.web.pages.sleep import revert_revision, sleep_page

ROUTES: list[BaseRoute] = [
    Route("/", now_page, methods=["GET"], name="now"),
    Route("/context", context_page, methods=["GET"], name="context"),
    Route("/memory", memory_page, methods=["GET"], name="memory"),
    Route("/memory/retract", retract_fact, methods=["POST"], name="memory_retract"),
    Route("/memory/correct", correct_fact, methods=["POST"], name="memory_correct"),
    Route("/sleep", sleep_page, methods=["GET"], name="sleep"),
    Route("/sleep/revert", revert_revision, methods=["POST"], name="sleep_revert"),
    Route("/journal", journal_page, methods=["GET"], name="journal"),
    Route("/charts", charts_page, methods=["GET"], name="charts"),
]
NAV: list[tuple[str, str]] = [
    ("/", "Now"),
    ("/context", "Context"),
    ("/memory", "Memory"),
    ("/sleep", "Sleep & dreams"),
    ("/journal", "Journal & forks"),
    ("/charts", "Charts"),
]
