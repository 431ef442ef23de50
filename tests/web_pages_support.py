"""A console over a real daemon core with a few days' worth of things to show.

`filled_console` builds the daemon's services with `open_services` (tests.sleep_support's
rig: a real home, SQLite, the offline summariser, miner and dreamer), has a conversation with
it — one message delegates to a fork — runs a real night's sleep (mining, maintenance,
dreams, wake-up), then serves the console's ASGI app (`build_app`) to an httpx client on the
same event loop, logged in with the console's token.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from daemon.events import JournalNote, SleepStarted
from daemon.models.base import ModelRequest, ToolResultBlock
from daemon.services import nightly_phases
from daemon.settings import Settings
from daemon.testing import Reply, ScriptedModel
from daemon.web.app import build_app
from daemon.web.auth import ConsoleAuth
from tests.sleep_support import Rig, rig

TOKEN = "console-test-token"
HOST = "console.test"
TALK = (
    "My sister Ana lives in Lisbon.",
    "We decided to feed the sourdough starter twice a day with rye flour.",
    "Please count how much kelp we have.",
    "The scraper crashes with a timeout traceback; we agreed the scraper bug needs a retry with backoff.",
)
FORK_TASK = "count the rows of kelp"


def _results(request: ModelRequest) -> list[ToolResultBlock]:
    last = request.messages[-1]
    return (
        [b for b in last.content if isinstance(b, ToolResultBlock)] if last.role == "user" else []
    )


def trunk_script(request: ModelRequest) -> Reply | str:
    """The trunk: delegates the kelp count, answers with what the fork found, else acknowledges."""
    got = _results(request)
    if got:
        return "Done: " + " | ".join(b.content for b in got)
    if "kelp" in request.messages[-1].text:
        return Reply(tool_calls=(("delegate", {"task": FORK_TASK}),))
    return "Noted."


def fork_script(request: ModelRequest) -> Reply:
    return Reply(
        tool_calls=(("task_complete", {"summary": "42 rows of kelp", "outcome": "success"}),)
    )


@dataclass(kw_only=True)
class Console:
    rig: Rig
    client: httpx.AsyncClient
    turns: dict[str, str]  # message → turn id

    async def csrf(self, path: str = "/memory") -> str:
        """The CSRF token a page's forms carry, read from the page as a browser would."""
        page = await self.client.get(path)
        found = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert found, f"no CSRF field on {path}"
        return found.group(1)


@asynccontextmanager
async def filled_console(root: Path, *, settings: Settings | None = None) -> AsyncIterator[Console]:
    async with rig(
        root,
        settings=settings,
        phases=nightly_phases,
        models={"trunk": ScriptedModel(trunk_script), "delegate": ScriptedModel(fork_script)},
    ) as r:
        turns = {text: await r.say(text) for text in TALK}
        await r.memory.remember("my dentist is Dr Vidal", origin="person")
        r.clock.advance(hours=14)
        # The night takes time on the fake clock: each step that changes something takes a
        # while, so the timeline's winding-down and asleep bands have a width.
        r.bus.on(SleepStarted, lambda e: r.clock.advance(minutes=5), name="test.night_passes")
        r.bus.on(JournalNote, lambda e: r.clock.advance(minutes=40), name="test.night_passes")
        await r.cycle.run("manual")
        r.clock.advance(hours=1)
        app = build_app(r.services, ConsoleAuth(token=TOKEN, hosts=frozenset({HOST})))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=f"http://{HOST}"
        ) as client:
            login = await client.post("/login", data={"token": TOKEN})
            assert login.status_code == 303, login.text
            yield Console(rig=r, client=client, turns=turns)
