"""MCP servers: each `[[mcp.servers]]` entry's tools, offered to the model as the daemon's own.

`McpServers` owns one named task per enabled server. A task connects (a stdio command the
daemon starts, or a streamable HTTP URL), initializes, lists the tools and keeps the session
open; when the connection ends (the process died, the stream broke) it starts again after a
backoff that doubles from `restart_base_s` to `restart_max_s`. Nothing waits for a server:
the daemon is up at once and each server's tools appear when it has answered, so a broken
server costs a log line and a status entry, never the daemon.

Each remote tool becomes a `Tool` named `mcp__<server>__<tool>` whose permission comes from
the server's entry (`tools` by the remote name, else `permission`). A call to a server that
is down or dies mid-call is a tool error the model reads; the restart goes on in the
background. What a server returns is outside text: its output is labelled `tool`, images and
other binary content are summarised, never passed on.

The SDK is imported only when a server is configured: a daemon without MCP servers pays
nothing for it. How names, schemas and results are translated is `mcp_translate`'s.
"""

from __future__ import annotations

import enum
import os
import shutil
import string
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

import anyio
from anyio.abc import TaskGroup

from daemon.clock import Clock, SystemClock
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.paths import Home
from daemon.settings import McpServer, McpSettings
from daemon.tools.mcp_translate import permission_subject, portable_schema, render_result, tool_name
from daemon.tools.registry import Tool, ToolContext, ToolError, label_untrusted

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp import ClientSession
    from mcp import types as mcp_types

log = get_logger("tools.mcp")

# A description is the server's text in every request's tool list: bounded.
_DESCRIPTION_MAX = 1024
_LIST_PAGES_MAX = 50
# What a server gets from the daemon's environment besides its entry's `env` (the SDK adds
# HOME, LOGNAME, PATH, SHELL, TERM and USER): never a key or a token unless the entry names it.
_LOCALE_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
# A server's stderr file is cut back to its tail when it grows past this at a start.
_STDERR_MAX_BYTES = 1_000_000


class ServerState(enum.StrEnum):
    STARTING = "starting"  # first start, not answered yet
    UP = "up"
    RESTARTING = "restarting"  # was up; the connection ended; starting again
    DOWN = "down"  # never came up; retried after the backoff


@dataclass(frozen=True, kw_only=True)
class McpServerStatus:
    """One server as `reverie status` shows it."""

    name: str
    transport: str  # "stdio" or "http"
    target: str  # the command or the URL
    state: ServerState
    tools: int
    restarts: int
    last_error: str | None
    since: str | None  # ISO time of the last change of state

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "target": self.target,
            "state": self.state.value,
            "tools": self.tools,
            "restarts": self.restarts,
            "last_error": self.last_error,
            "since": self.since,
        }


def server_environment(entry: McpServer, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a stdio server starts with, beyond the SDK's minimal one.

    The entry's `env` values may name the daemon's variables as `${NAME}` — the only way a
    key reaches a server; the locale and time zone are passed so output reads as expected.
    """
    source = os.environ if environ is None else environ
    env = {k: source[k] for k in _LOCALE_ENV if k in source}
    for key, value in entry.env.items():
        template = string.Template(value)
        missing = [n for n in template.get_identifiers() if n not in source]
        if missing:
            log.warning("mcp env names an unset variable", server=entry.name, missing=missing)
        env[key] = template.safe_substitute({**source, **dict.fromkeys(missing, "")})
    return env


def check_entry(entry: McpServer, home: Home) -> str | None:
    """What is wrong with an entry before anything is started (doctor), or None."""
    if entry.url is not None:
        parts = urlsplit(entry.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"url {entry.url!r} is not an http(s) URL"
        return None
    assert entry.command is not None
    path = server_environment(entry).get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(entry.command, path=path) is None:
        return f"command {entry.command!r} is not found on PATH"
    cwd = _cwd(entry, home)
    if cwd is not None and not cwd.is_dir():
        return f"cwd {str(cwd)!r} is not a directory"
    return None


def _cwd(entry: McpServer, home: Home) -> Path | None:
    if entry.cwd is None:
        return home.workspace_dir if home.workspace_dir.is_dir() else None
    path = Path(entry.cwd).expanduser()
    return path if path.is_absolute() else home.root / path


def stderr_path(home: Home, name: str) -> Path:
    """Where a stdio server's stderr goes (its own file: the daemon's log stays structured)."""
    return home.root / "mcp" / f"{name}.stderr"


def _describe(exc: BaseException) -> str:
    """One line for status and the log (an ExceptionGroup by what is inside it)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


class _ConnectionEnded(ReverieError):
    """The server closed the connection (its process exited, or the stream broke)."""


class _Link:
    """One configured server: its connection, its tools and their state."""

    def __init__(self, home: Home, entry: McpServer, settings: McpSettings, clock: Clock) -> None:
        self.home = home
        self.entry = entry
        self.settings = settings
        self.clock = clock
        self.state = ServerState.STARTING
        self.restarts = 0
        self.last_error: str | None = None
        self.since = clock.now()
        self._session: ClientSession | None = None
        self._tools: tuple[Tool, ...] = ()
        # What the connection's task waits on: "ended" (reconnect) or "tools" (list again).
        self._signals: MemoryObjectSendStream[str] | None = None
        self._up_at: float | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    def tools(self) -> tuple[Tool, ...]:
        # While restarting the last listing stays offered, so a call reads why it cannot run.
        return self._tools if self.state in (ServerState.UP, ServerState.RESTARTING) else ()

    def status(self) -> McpServerStatus:
        return McpServerStatus(
            name=self.name,
            transport="http" if self.entry.url else "stdio",
            target=self.entry.url or " ".join([self.entry.command or "", *self.entry.args]),
            state=self.state,
            tools=len(self._tools),
            restarts=self.restarts,
            last_error=self.last_error,
            since=self.since.isoformat(),
        )

    def _become(self, state: ServerState) -> None:
        if state != self.state:
            self.state = state
            self.since = self.clock.now()

    async def run(self) -> None:
        """Keep the server connected until cancelled, starting it again with backoff."""
        base, most = self.settings.restart_base_s, self.settings.restart_max_s
        delay = base
        while True:
            self._up_at = None
            try:
                await self._serve_once()
            except Exception as exc:
                self.last_error = _describe(exc)
            self._session = None
            self._signals = None
            # A connection that held for a while earns a fresh backoff; a crash loop does not.
            if self._up_at is not None and anyio.current_time() - self._up_at >= most:
                delay = base
            self._become(ServerState.RESTARTING if self._tools else ServerState.DOWN)
            log.warning(
                "mcp server down; starting it again",
                server=self.name,
                error=self.last_error,
                retry_in_s=round(delay, 2),
            )
            await anyio.sleep(delay)
            delay = min(delay * 2, most)
            self.restarts += 1

    async def _serve_once(self) -> None:
        """Connect, list the tools and serve until the connection ends (then raise why)."""
        async with self._connected() as (session, listing, signals, why):
            self._session = session
            self._up_at = anyio.current_time()
            self._offer(listing)
            self._become(ServerState.UP)
            log.info("mcp server up", server=self.name, tools=len(self._tools))
            async for signal in signals:
                if signal == "ended":
                    break
                try:
                    with anyio.fail_after(self.settings.start_timeout_s):
                        self._offer(await self._list(session))
                    log.info("mcp server's tools changed", server=self.name, tools=len(self._tools))
                except Exception as exc:
                    log.warning(
                        "mcp tools could not be listed", server=self.name, error=_describe(exc)
                    )
                    break
            raise _ConnectionEnded(why("the connection ended (the server exited or closed it)"))

    @asynccontextmanager
    async def _connected(
        self,
    ) -> AsyncIterator[tuple[ClientSession, list[mcp_types.Tool], Any, Callable[[str], str]]]:
        """A session, initialized, with the server's tools listed; and the connection's signals.

        Yields (session, tools, signals, why): `signals` receives "ended" when the server's
        messages stop and "tools" when it says its tools changed; `why(text)` adds the last
        line the server wrote to stderr. Raises, with that line, when the server does not
        answer within `start_timeout_s` or cannot be started at all.
        """
        from mcp import ClientSession, types

        async with AsyncExitStack() as stack:
            stderr = stack.enter_context(self._stderr())
            why = partial(self._stderr_tail, stderr, stderr.tell())
            try:
                read, write = await stack.enter_async_context(self._transport(stderr))
                tg = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tg.cancel_scope.cancel)
                signals_in, signals = anyio.create_memory_object_stream[str](16)
                relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
                for stream in (signals_in, signals, relay_in, relay_out):
                    stack.callback(stream.close)
                tg.start_soon(
                    self._relay, read, relay_in, signals_in, name=f"mcp-relay:{self.name}"
                )
                session = await stack.enter_async_context(
                    ClientSession(
                        relay_out,
                        write,
                        message_handler=partial(self._on_message, signals_in),
                        client_info=types.Implementation(name="reverie", version="1"),
                    )
                )
                with anyio.fail_after(self.settings.start_timeout_s):
                    await session.initialize()
                    listing = await self._list(session)
            except TimeoutError:
                raise TimeoutError(
                    why(f"no answer within {self.settings.start_timeout_s:g}s")
                ) from None
            except Exception as exc:
                raise RuntimeError(why(_describe(exc))) from exc
            self._signals = signals_in
            yield session, listing, signals, why

    @asynccontextmanager
    async def _transport(self, stderr: TextIO) -> AsyncIterator[tuple[Any, Any]]:
        if self.entry.url is not None:
            from mcp.client.streamable_http import streamable_http_client

            async with streamable_http_client(self.entry.url) as streams:
                yield streams
            return
        from mcp import StdioServerParameters, stdio_client

        assert self.entry.command is not None
        params = StdioServerParameters(
            command=self.entry.command,
            args=list(self.entry.args),
            env=server_environment(self.entry),
            cwd=_cwd(self.entry, self.home),
        )
        async with stdio_client(params, errlog=stderr) as streams:
            yield streams

    def _stderr(self) -> TextIO:
        """The server's stderr file (its own; the daemon's log stays structured)."""
        path = stderr_path(self.home, self.name)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists() and path.stat().st_size > _STDERR_MAX_BYTES:
            tail = path.read_bytes()[-_STDERR_MAX_BYTES // 2 :]
            path.write_bytes(tail)
        return path.open("a", encoding="utf-8", errors="replace")

    @staticmethod
    def _stderr_tail(stderr: TextIO, offset: int, text: str) -> str:
        """`text`, with the last line the server wrote to stderr since `offset` (what explains it)."""
        try:
            stderr.flush()
            with open(stderr.name, encoding="utf-8", errors="replace") as f:
                f.seek(offset)
                lines = [line.strip() for line in f.read()[-4000:].splitlines() if line.strip()]
        except OSError:
            return text
        return f"{text}; stderr: {lines[-1][:300]}" if lines else text

    @staticmethod
    async def _relay(
        read: Any, into: MemoryObjectSendStream[Any], signals: MemoryObjectSendStream[str]
    ) -> None:
        """Pass the server's messages to the session; say "ended" when they stop."""
        try:
            async with into:
                async for item in read:
                    await into.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            pass
        finally:
            _signal(signals, "ended")

    async def _on_message(self, signals: MemoryObjectSendStream[str], message: Any) -> None:
        from mcp import types

        if isinstance(message, types.ToolListChangedNotification):
            _signal(signals, "tools")
        elif isinstance(message, Exception):
            log.warning("mcp transport error", server=self.name, error=_describe(message))

    @staticmethod
    async def _list(session: ClientSession) -> list[mcp_types.Tool]:
        from mcp import types

        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES_MAX):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _offer(self, listing: list[mcp_types.Tool]) -> None:
        taken: set[str] = set()
        tools = []
        for remote in listing:
            tool = self._tool(remote, taken)
            taken.add(tool.name)
            tools.append(tool)
        self._tools = tuple(tools)

    def _tool(self, remote: mcp_types.Tool, taken: set[str]) -> Tool:
        entry = self.entry
        schema = portable_schema(remote.input_schema)
        about = (remote.description or remote.title or remote.name).strip()
        description = f"[MCP server {entry.name}] {about}"
        if len(description) > _DESCRIPTION_MAX:
            description = description[: _DESCRIPTION_MAX - 1] + "…"
        annotations = remote.annotations
        return Tool(
            name=tool_name(entry.name, remote.name, taken),
            description=description,
            input_schema=schema,
            handler=partial(self.call, remote.name),
            timeout_s=entry.call_timeout_s,
            # The server says the tool only reads: calls in one step may overlap.
            concurrent=bool(annotations and annotations.read_only_hint),
            output_origin="tool",
            # What a server returns is outside text: delivered in the untrusted-output label.
            untrusted=True,
            permission=entry.tools.get(remote.name, entry.permission),
            subject=permission_subject(schema),
        )

    async def call(self, remote: str, ctx: ToolContext, arguments: dict[str, Any]) -> str:
        """Call `remote` on the server; a server that is down or dies mid-call is a ToolError.

        Cancellation (the registry's timeout, a cancelled turn) is passed on; the SDK tells
        the server the request was abandoned.
        """
        from mcp import MCPError, types
        from pydantic import ValidationError

        session = self._session
        if session is None:
            raise ToolError(self._unavailable())
        try:
            result = await session.call_tool(remote, arguments)
        except MCPError as exc:
            if exc.error.code == types.CONNECTION_CLOSED:
                self._connection_lost()
                raise ToolError(self._unavailable()) from None
            said = label_untrusted(f"mcp__{self.name}__{remote}", exc.error.message)
            raise ToolError(
                f"MCP server '{self.name}' refused the call to '{remote}': {said}"
            ) from None
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._connection_lost()
            log.warning("mcp call lost its connection", server=self.name, error=_describe(exc))
            raise ToolError(self._unavailable()) from None
        except ValidationError as exc:
            raise ToolError(
                f"MCP server '{self.name}' answered '{remote}' with a malformed result: "
                f"{_describe(exc)}"
            ) from None
        return render_result(self.name, remote, result)

    def _connection_lost(self) -> None:
        self._session = None
        if self.state == ServerState.UP:
            self._become(ServerState.RESTARTING)
        if self._signals is not None:
            _signal(self._signals, "ended")

    def _unavailable(self) -> str:
        if self.state == ServerState.DOWN:
            why = f" ({self.last_error})" if self.last_error else ""
            return f"MCP server '{self.name}' is not running{why}; it is retried in the background"
        return f"MCP server '{self.name}' is restarting; try again shortly"


def _signal(signals: MemoryObjectSendStream[str], what: str) -> None:
    try:
        signals.send_nowait(what)
    except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


class McpServers:
    """The configured MCP servers, each kept connected by a task of this one's task group.

    Entering starts the tasks and returns at once (a server comes up in the background);
    leaving stops every server, each stdio process within the SDK's bounded shutdown.
    """

    def __init__(self, home: Home, settings: McpSettings, clock: Clock | None = None) -> None:
        clock = clock if clock is not None else SystemClock()
        self._links = [_Link(home, e, settings, clock) for e in settings.servers if e.enabled]
        self._tg: TaskGroup | None = None

    async def __aenter__(self) -> McpServers:
        if self._tg is not None:
            raise RuntimeError("McpServers is already entered")
        if not self._links:
            return self
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        for link in self._links:
            tg.start_soon(link.run, name=f"mcp-server:{link.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        tg.cancel_scope.cancel()
        # The servers' tasks only end by this cancellation; whatever is unwinding the caller
        # passes through unchanged (not wrapped in this group's ExceptionGroup).
        await tg.__aexit__(None, None, None)
        return None

    def tools(self) -> Iterable[Tool]:
        for link in self._links:
            yield from link.tools()

    def status(self) -> list[McpServerStatus]:
        return [link.status() for link in self._links]


class ProbeFailed(ReverieError):
    """A server did not start and answer (the message says why, in one line)."""


async def probe(home: Home, entry: McpServer, timeout_s: float) -> list[str]:
    """Start `entry` once, list its tools' names and stop it (doctor).

    Raises ProbeFailed when it cannot be started or does not answer within `timeout_s`.
    """
    link = _Link(home, entry, McpSettings(start_timeout_s=timeout_s), SystemClock())
    try:
        async with link._connected() as (_session, listing, _signals, _why):
            link._offer(listing)
            return [t.name for t in link._tools]
    except Exception as exc:
        raise ProbeFailed(_describe(exc)) from None
