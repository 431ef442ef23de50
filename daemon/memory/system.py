"""The memory system: wires the index, embedder, facts, summariser and recall.

(Interface first — bodies follow in the next commits.)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.memory.api import MemoryView
from daemon.memory.index import MemoryIndex
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.tools import Tool

# topic_addenda(point, text) -> markdown of the matching topic bodies ("" when none);
# point is "recall_persona" or "summary_persona".
TopicAddenda = Callable[[str, str], str]


@dataclass(frozen=True, kw_only=True)
class RememberResult:
    """What happened to a `remember`/`correct` call."""

    status: Literal["stored", "duplicate", "similar", "corrected"]
    id: str  # the stored fact's id, or the existing one for duplicate/similar
    text: str  # the text as stored (dates resolved)
    message: str  # one line for the person or the model
    similar_to: str | None = None


class MemorySystem:
    """Wire the index, embedder, facts, summariser and recall; an async context manager."""

    def __init__(
        self,
        *,
        home: Home,
        db: Database,
        settings: Settings,
        roles: ModelRoles,
        bus: EventBus | None,
        clock: Clock,
        topic_addenda: TopicAddenda | None = None,
        background: bool = True,
    ) -> None:
        raise NotImplementedError

    index: MemoryIndex
    view: MemoryView

    async def __aenter__(self) -> MemorySystem:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        raise NotImplementedError

    def tools(self) -> list[Tool]:
        raise NotImplementedError

    def register(self, bus: EventBus) -> None:
        raise NotImplementedError

    async def remember(
        self, text: str, *, target: str = "memory", origin: str = "person", tags: Sequence[str] = ()
    ) -> RememberResult:
        raise NotImplementedError

    async def correct(self, uid: str, text: str, *, origin: str) -> RememberResult:
        raise NotImplementedError

    async def retract(self, uid: str, *, reason: str, origin: str) -> None:
        raise NotImplementedError

    async def recall(self, query: str, *, session_id: str | None = None) -> str:
        raise NotImplementedError

    async def summarise_session(self, session_id: str, *, wait: bool = False) -> Path | None:
        raise NotImplementedError

    async def index_session(self, session_id: str) -> int:
        raise NotImplementedError

    async def reindex(self) -> dict[str, int]:
        raise NotImplementedError

    @classmethod
    @asynccontextmanager
    async def open_view(cls, home: Home, settings: Settings) -> AsyncIterator[MemoryView]:
        raise NotImplementedError
        yield
