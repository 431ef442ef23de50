"""The seams of the system: the Protocols one system implements and another is handed.

Each is a contract across a boundary — a model provider, an embedder, the clock, the read side
of memory, a door to the person, a source of tools — and may have more than one
implementation (a real one and the one tests drive). The modules that first defined them
re-export them (`daemon.clock.Clock`, `daemon.models.base.Model`, ...), so either name is
the same class. This module is foundation: the types the signatures name (a `ModelRequest`,
a `MemoryItem`, a `Notice`) are imported for type checking only, never at run time.

Every seam is `runtime_checkable`; `isinstance` checks that the members are there, mypy that
their signatures match (tests/test_seams.py does both against the real implementations).

Not here: the repositories under `daemon/store/` are concrete classes, one per system, each
with its dialects inside — code is handed the class, there is no second implementation to
swap in. Contracts internal to one system (a sleep `Phase`, the memory search's helpers, the
context's thread readers) stay with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from daemon.chat.protocol import ClientFrame
    from daemon.chat.server import ClientHandle
    from daemon.memory.api import LiveHistory, MemoryItem
    from daemon.memory.last_word import LastWord
    from daemon.models.base import ModelRequest, StreamEvent
    from daemon.store.notices import Notice
    from daemon.tools.registry import Tool, ToolContext


@runtime_checkable
class Clock(Protocol):
    """Time from an injectable clock (`daemon.clock.SystemClock`, `FakeClock` in tests)."""

    def now(self) -> datetime:
        """The current time, timezone-aware (UTC)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class Model(Protocol):
    """A model provider. Implementations: Anthropic, OpenAI-compatible, offline, scripted."""

    provider: str

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one response; the last event is always `Completed`.

        On cancellation the underlying HTTP stream is closed and `CancelledError` propagates.
        Raises `ModelUnavailable` after retries are exhausted, `ModelError` otherwise.
        """
        ...

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """Exact prompt tokens for `request` if the provider can say, else None."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    """Embed texts; `dim == 0` means this embedder produces no vectors (lexical only)."""

    name: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a (len(texts), dim) float32 matrix of L2-normalised rows.

        Runs the work off the event loop; cancellation abandons the result (a worker thread
        already running finishes its batch in the background).
        """
        ...


@runtime_checkable
class MemoryView(Protocol):
    """The read side of memory used to build context every turn."""

    async def profile_facts(self, limit: int) -> list[MemoryItem]:
        """Active profile facts (target=profile), newest first."""
        ...

    async def recent_entries(self, limit: int) -> list[MemoryItem]:
        """The last memory entries of any kind except chunks (recent themes), newest first."""
        ...

    async def recent_summaries(self, limit: int) -> list[MemoryItem]:
        """The last session summaries, newest first."""
        ...

    async def recent_facts(self, limit: int) -> list[MemoryItem]:
        """The last explicit facts (target=memory), newest first."""
        ...

    async def auto_recall(
        self,
        prompt: str,
        *,
        previous_reply: str = "",
        exclude_ids: frozenset[str] = frozenset(),
        limit: int = 6,
        live: LiveHistory | None = None,
    ) -> list[MemoryItem]:
        """Memories relevant to `prompt`, best first, deduplicated, none from `exclude_ids`
        and none that `live` (the conversation the model is replaying) already shows."""
        ...

    async def last_person_word(
        self, now: datetime, *, answering: str | None = None
    ) -> LastWord | None:
        """The person's newest message up to `now`, passing over `answering` — the message
        being answered, when it is the newest (None: they never wrote)."""
        ...

    async def mark_corrected(self, texts: list[str]) -> list[str]:
        """`texts` (what was written before: a dream, the journal, a handover) with a note
        after each line that states a value since corrected (`daemon.memory.corrections`)."""
        ...


@runtime_checkable
class ChatHandler(Protocol):
    """What the daemon does with connections and frames (the chat server's other side).

    The server awaits each callback inline: `handle_frame` runs once per frame, in order,
    per connection, so a handler should return quickly and hand long work (a turn) to its
    own task group, replying later through `client.send`. `client_connected` is where the
    handler sends the `hello` frame. An exception from a callback is logged and answered
    with an `internal` error frame; it never takes the server down. A callback is
    cancelled if its client is dropped (too slow, vanished) or the server stops;
    `client_disconnected` then still runs, shielded and bounded by a timeout.
    """

    async def client_connected(self, client: ClientHandle) -> None: ...

    async def handle_frame(self, client: ClientHandle, frame: ClientFrame) -> None: ...

    async def client_finished_sending(self, client: ClientHandle) -> None:
        """Return once every reply owed to a client that shut its write side has been sent.

        Called after a clean end of input; the connection stays open for writing until
        this returns (bounded by `HALF_CLOSE_LINGER_S`).
        """
        ...

    async def client_disconnected(self, client: ClientHandle) -> None: ...


@runtime_checkable
class NoticeDesk(Protocol):
    """Where the person's clients collect what the agent told them (`daemon.schedule.courier`)."""

    async def attach(self, client: Any) -> bool: ...

    def detach(self, client: Any) -> None: ...

    async def seen(self, client: Any, ids: Sequence[str]) -> int:
        """The client showed these notices; a refusal is a `ProtocolError`."""
        ...


@runtime_checkable
class NoticeChannel(Protocol):
    """Another door to the person (`daemon.channels`) that can carry notices."""

    name: str

    def takes_notices(self) -> bool: ...

    def holds_notice(self, notice_id: str) -> bool: ...

    def deliver_notice(self, notice: Notice) -> bool: ...


@runtime_checkable
class ToolGuard(Protocol):
    """Decides whether one call may run (the permission policy and the person's approvals)."""

    async def authorize(
        self, tool: Tool, arguments: dict[str, Any], ctx: ToolContext
    ) -> str | None:
        """None when the call may run; otherwise the reason it may not, for the model to read."""
        ...


@runtime_checkable
class ToolSource(Protocol):
    """Tools that come and go while the daemon runs (an MCP server's, once it has answered)."""

    def tools(self) -> Iterable[Tool]: ...
