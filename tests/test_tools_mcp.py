"""MCP servers: a real server process written with the SDK (tests/fakes/mcp_server.py).

Its tools are offered namespaced, called through the registry, and it is killed mid-call,
restarted and used again; a server that cannot start is retried without holding anything
up; one end-to-end run goes through the real daemon and the fake Messages API. Every test
checks that no server process outlives it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.paths import Home
from daemon.settings import McpServer, McpSettings
from daemon.tools.mcp import McpServers, ProbeFailed, ServerState, probe
from daemon.tools.mcp_translate import portable_schema, render_result, tool_name
from daemon.tools.registry import Tool, ToolContext, ToolError, ToolRegistry, label_untrusted
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import (
    FAKE_API_CONFIG,
    REPO,
    Client,
    DaemonProcess,
    daemon_env,
    run_cli,
    wait_until,
)

FAKE = REPO / "tests" / "fakes" / "mcp_server.py"


def body(content: str) -> str:
    """The text inside a server answer's untrusted-output label (which must be there)."""
    head, _, rest = content.partition("\n")
    assert head.startswith("<tool_output ") and 'trust="untrusted"' in head, content
    inner = rest.split("\n", 1)[1]  # past the label's one line of explanation
    assert inner.endswith("\n</tool_output>"), content
    return inner.removesuffix("\n</tool_output>")


CTX = ToolContext(session_id="s-mcp", turn_id="t-mcp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead, but nobody reaped it: that is a leak too.
    return True


def _pids(pidfile: Path) -> list[int]:
    return [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where every server process the test starts writes its pid; none may outlive the test."""
    path = tmp_path / "mcp-pids"
    yield path
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in _pids(path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in _pids(path) if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"MCP server processes outlived the test: {left}"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    h = Home(tmp_path / "home")
    h.ensure()
    return h


def _entry(pidfile: Path, name: str = "notes", **kw: Any) -> McpServer:
    env = {"MCP_FAKE_PIDFILE": str(pidfile), **kw.pop("env", {})}
    return McpServer(name=name, command=sys.executable, args=[str(FAKE)], env=env, **kw)


def _settings(*servers: McpServer, **kw: Any) -> McpSettings:
    values: dict[str, Any] = {"restart_base_s": 0.2, "restart_max_s": 1.0, "start_timeout_s": 20}
    return McpSettings(servers=list(servers), **(values | kw))


async def _until(pred: Callable[[], bool], what: str, within: float = 30) -> None:
    with anyio.move_on_after(within):
        while not pred():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out waiting for {what}")


def _state(servers: McpServers, name: str = "notes") -> ServerState:
    return next(s.state for s in servers.status() if s.name == name)


def _by_name(servers: McpServers) -> dict[str, Tool]:
    return {t.name: t for t in servers.tools()}


pytestmark = pytest.mark.anyio


# --- a live server --------------------------------------------------------------------------


async def test_a_servers_tools_are_offered_namespaced_and_answer_through_the_registry(
    home: Home, pidfile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROVIDER_API_KEY", "sk-daemon-secret")
    monkeypatch.setenv("NOTES_TOKEN", "token-for-notes")
    entry = _entry(
        pidfile,
        permission="ask",
        tools={"echo": "allow", "crash": "deny"},
        call_timeout_s=7,
        env={"NOTES_TOKEN": "${NOTES_TOKEN}"},
    )
    started = anyio.current_time()
    async with McpServers(home, _settings(entry)) as servers:
        # Entering waits for no server: the daemon is up before any server answers.
        assert anyio.current_time() - started < 0.5
        assert _state(servers) == ServerState.STARTING and list(servers.tools()) == []
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        registry = ToolRegistry(4000)
        registry.add_source(servers)
        names = registry.names()
        assert {
            "mcp__notes__echo",
            "mcp__notes__add",
            "mcp__notes__slow",
            "mcp__notes__fail",
            "mcp__notes__crash",
            "mcp__notes__picture",
        } <= set(names)
        assert all(re.fullmatch(r"mcp__notes__[a-z_]+", n) for n in names)
        tools = _by_name(servers)
        echo, add = tools["mcp__notes__echo"], tools["mcp__notes__add"]
        # Permission: per tool by its remote name, else the server's default.
        assert (echo.permission, add.permission, tools["mcp__notes__crash"].permission) == (
            "allow",
            "ask",
            "deny",
        )
        assert echo.description == "[MCP server notes] Say `text` back."
        assert echo.output_origin == "tool" and echo.timeout_s == 7
        # Rules match a path-, URL- or command-like argument; other tools are taken whole.
        assert tools["mcp__notes__read_note"].subject == "path"
        assert echo.subject is None and add.subject is None
        assert add.input_schema["properties"]["a"]["type"] == "integer"
        spec_names = {s.name for s in registry.specs()}
        assert "mcp__notes__echo" in spec_names

        out = await registry.call("mcp__notes__echo", {"text": "the heron is back"}, CTX)
        # A server's answer is outside text: it arrives inside the untrusted-output label.
        assert out.is_error is False
        assert out.content == label_untrusted("mcp__notes__echo", "the heron is back")
        out = await registry.call("mcp__notes__add", {"a": 40, "b": 2}, CTX)
        assert out.content == label_untrusted("mcp__notes__add", "42")
        # The registry checks arguments against the server's schema before anything is sent.
        out = await registry.call("mcp__notes__add", {"a": "forty", "b": 2}, CTX)
        assert out.is_error and "a must be of type integer" in out.content
        # A tool that reports an error is a tool error with the server's words.
        out = await registry.call("mcp__notes__fail", {"reason": "the notebook is locked"}, CTX)
        assert out.is_error
        assert "MCP server 'notes' tool 'fail' failed" in out.content
        # ...and so are the server's own words about a failure.
        assert 'trust="untrusted"' in out.content and "the notebook is locked" in out.content
        assert "the notebook is locked" in out.content
        # Binary content is summarised, never passed on.
        out = await registry.call("mcp__notes__picture", {}, CTX)
        assert out.content == label_untrusted(
            "mcp__notes__picture", "a caption\n[image: image/png, 2 KB]"
        )
        # The daemon's keys stay home; a variable the entry names is passed.
        out = await registry.call("mcp__notes__env", {"name": "FAKE_PROVIDER_API_KEY"}, CTX)
        assert body(out.content) == "<unset>"
        out = await registry.call("mcp__notes__env", {"name": "NOTES_TOKEN"}, CTX)
        assert body(out.content) == "token-for-notes"
        status = servers.status()[0]
        assert (status.state, status.tools, status.restarts, status.transport) == (
            ServerState.UP,
            len(names),
            0,
            "stdio",
        )
        assert len(_pids(pidfile)) == 1
    # Leaving stops the server.
    assert not any(_alive(p) for p in _pids(pidfile))


async def test_a_server_killed_mid_call_is_a_tool_error_then_restarted_and_used_again(
    home: Home, pidfile: Path
) -> None:
    async with McpServers(home, _settings(_entry(pidfile, permission="allow"))) as servers:
        registry = ToolRegistry()
        registry.add_source(servers)
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        [first] = _pids(pidfile)
        outcome: list[Any] = []

        async def slow_call() -> None:
            outcome.append(await registry.call("mcp__notes__slow", {"seconds": 30}, CTX))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow_call)
                await anyio.sleep(0.5)
                os.kill(first, signal.SIGKILL)
        [out] = outcome
        assert out.is_error
        assert out.content == "error: MCP server 'notes' is restarting; try again shortly"
        # The restart happens in the background; a call meanwhile reads the same error.
        assert _state(servers) == ServerState.RESTARTING
        assert "mcp__notes__echo" in registry.names()
        await _until(lambda: _state(servers) == ServerState.UP, "the server back up")
        second = _pids(pidfile)[-1]
        assert second != first and not _alive(first)
        out = await registry.call("mcp__notes__echo", {"text": "still here"}, CTX)
        assert (out.is_error, out.content) == (
            False,
            label_untrusted("mcp__notes__echo", "still here"),
        )
        status = servers.status()[0]
        assert status.restarts == 1
        assert status.last_error is not None and "connection ended" in status.last_error


async def test_a_server_that_exits_mid_call_is_a_tool_error_and_comes_back(
    home: Home, pidfile: Path
) -> None:
    async with McpServers(home, _settings(_entry(pidfile))) as servers:
        registry = ToolRegistry()
        registry.add_source(servers)
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        with anyio.fail_after(10):
            out = await registry.call("mcp__notes__crash", {}, CTX)
        assert out.is_error and "is restarting; try again shortly" in out.content
        await _until(lambda: _state(servers) == ServerState.UP, "the server back up")
        assert len(_pids(pidfile)) == 2
        assert body((await registry.call("mcp__notes__add", {"a": 1, "b": 1}, CTX)).content) == "2"


async def test_a_server_that_announces_new_tools_has_them_offered(
    home: Home, pidfile: Path
) -> None:
    async with McpServers(home, _settings(_entry(pidfile))) as servers:
        registry = ToolRegistry()
        registry.add_source(servers)
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        assert "mcp__notes__heron_count" not in registry.names()
        out = await registry.call("mcp__notes__learn", {"name": "heron_count"}, CTX)
        assert body(out.content) == "learned heron_count"
        await _until(lambda: "mcp__notes__heron_count" in registry.names(), "the new tool")
        out = await registry.call("mcp__notes__heron_count", {}, CTX)
        assert body(out.content) == "I am heron_count"


async def test_the_entrys_permissions_decide_through_the_daemons_guard(
    home: Home, pidfile: Path
) -> None:
    from daemon.settings import PermissionRule
    from daemon.tools.approvals import Approvals, PermissionGuard
    from daemon.tools.policy import PermissionPolicy

    entry = _entry(pidfile, permission="ask", tools={"echo": "allow", "crash": "deny"})
    guard = PermissionGuard(
        policy=PermissionPolicy([PermissionRule(tool="mcp__notes__add", decision="allow")]),
        approvals=Approvals(),
        timeout_s=2,
    )
    async with McpServers(home, _settings(entry)) as servers:
        registry = ToolRegistry(guard=guard)
        registry.add_source(servers)
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        said = (await registry.call("mcp__notes__echo", {"text": "hi"}, CTX)).content
        assert said == label_untrusted("mcp__notes__echo", "hi")
        # A rule outranks the entry's default.
        assert body((await registry.call("mcp__notes__add", {"a": 1, "b": 2}, CTX)).content) == "3"
        denied = await registry.call("mcp__notes__crash", {}, CTX)
        assert denied.is_error and "denied" in denied.content
        # Asked, with no client of the person's connected: no, and nothing reached the server.
        asked = await registry.call("mcp__notes__picture", {}, CTX)
        assert asked.is_error and "approval" in asked.content
        status = servers.status()[0]
        assert (status.state, status.restarts, len(_pids(pidfile))) == (ServerState.UP, 0, 1)


# --- servers that do not come up -----------------------------------------------------------


async def test_a_server_that_cannot_start_is_retried_with_backoff_and_holds_nothing_up(
    home: Home, pidfile: Path, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    failing = McpServer(
        name="brittle",
        command=sys.executable,
        args=[
            "-c",
            "import sys, time; open(sys.argv[1], 'a').write(f'{time.monotonic()}\\n'); "
            "sys.stderr.write('notes.db: no such file\\n'); sys.exit(2)",
            str(starts),
        ],
    )
    missing = McpServer(name="ghost", command="/nonexistent/mcp-server")
    settings = _settings(failing, missing, _entry(pidfile), restart_base_s=0.2, restart_max_s=0.8)
    started = anyio.current_time()
    async with McpServers(home, settings) as servers:
        assert anyio.current_time() - started < 0.5
        # The healthy server is not held up by the broken ones.
        await _until(lambda: _state(servers) == ServerState.UP, "the good server up")
        await _until(lambda: _state(servers, "ghost") == ServerState.DOWN, "the ghost down")
        await _until(
            lambda: starts.exists() and len(starts.read_text().split()) >= 5, "five starts", 30
        )
        by_name = {s.name: s for s in servers.status()}
        assert by_name["brittle"].state == ServerState.DOWN and by_name["brittle"].tools == 0
        assert by_name["brittle"].last_error is not None
        assert "stderr: notes.db: no such file" in by_name["brittle"].last_error
        assert by_name["ghost"].last_error == "command not found: /nonexistent/mcp-server"
        assert by_name["ghost"].restarts >= 1
        # None of their tools is offered; the good server's are.
        names = [t.name for t in servers.tools()]
        assert names and all(n.startswith("mcp__notes__") for n in names)
    times = [float(x) for x in starts.read_text().split()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The wait doubles from restart_base_s and stops at restart_max_s (each gap also holds
    # the process's own start, so only the lower bounds are exact).
    for gap, least in zip(gaps, (0.2, 0.4, 0.8, 0.8), strict=False):
        assert gap >= least, gaps
    assert gaps[3] < gaps[2] + 0.5, gaps


async def test_a_server_that_never_answers_is_given_up_after_start_timeout_and_killed(
    home: Home, pidfile: Path
) -> None:
    silent = McpServer(
        name="silent",
        command=sys.executable,
        args=[
            "-c",
            "import os, sys, time; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); "
            "time.sleep(60)",
            str(pidfile),
        ],
    )
    async with McpServers(home, _settings(silent, start_timeout_s=0.5)) as servers:
        await _until(lambda: servers.status()[0].last_error is not None, "the first timeout")
        assert servers.status()[0].last_error == "no answer within 0.5s"
        assert servers.status()[0].state == ServerState.DOWN
        # The process that did not answer is stopped before the next start.
        await _until(lambda: len(_pids(pidfile)) >= 2, "a second start")
        assert not _alive(_pids(pidfile)[0])


async def test_a_call_to_a_server_that_is_not_up_is_a_clear_tool_error(
    home: Home, pidfile: Path
) -> None:
    async with McpServers(home, _settings(_entry(pidfile))) as servers:
        await _until(lambda: _state(servers) == ServerState.UP, "the server up")
        echo = _by_name(servers)["mcp__notes__echo"]
        os.kill(_pids(pidfile)[0], signal.SIGKILL)
        await _until(lambda: _state(servers) != ServerState.UP, "the death noticed")
        with pytest.raises(ToolError, match="MCP server 'notes' is restarting; try again shortly"):
            await echo.handler(CTX, {"text": "anyone?"})
        await _until(lambda: _state(servers) == ServerState.UP, "the server back up")


# --- streamable HTTP ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_server(port: int, pidfile: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MCP_FAKE_PIDFILE": str(pidfile)}
    return subprocess.Popen(
        [sys.executable, str(FAKE), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_a_streamable_http_server_is_used_and_reconnected_after_it_comes_back(
    home: Home, pidfile: Path
) -> None:
    port = _free_port()
    entry = McpServer(name="web", url=f"http://127.0.0.1:{port}/mcp", permission="allow")
    server = _http_server(port, pidfile)
    try:
        async with McpServers(home, _settings(entry)) as servers:
            registry = ToolRegistry()
            registry.add_source(servers)
            await _until(lambda: _state(servers, "web") == ServerState.UP, "the web server up")
            assert servers.status()[0].transport == "http"
            assert (
                body((await registry.call("mcp__web__add", {"a": 2, "b": 3}, CTX)).content) == "5"
            )
            outcome: list[Any] = []

            async def slow_call() -> None:
                outcome.append(await registry.call("mcp__web__slow", {"seconds": 30}, CTX))

            with anyio.fail_after(20):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow_call)
                    await anyio.sleep(0.5)
                    server.kill()
            server.wait(10)
            assert outcome[0].is_error and "is restarting" in outcome[0].content
            await _until(lambda: _state(servers, "web") != ServerState.UP, "the loss noticed")
            server = _http_server(port, pidfile)
            await _until(lambda: _state(servers, "web") == ServerState.UP, "the web server back")
            out = await registry.call("mcp__web__echo", {"text": "over http"}, CTX)
            assert out.content == label_untrusted("mcp__web__echo", "over http")
    finally:
        server.kill()
        server.wait(10)


# --- doctor's probe ------------------------------------------------------------------------


async def test_probe_starts_a_server_once_lists_its_tools_and_stops_it(
    home: Home, pidfile: Path
) -> None:
    names = await probe(home, _entry(pidfile), timeout_s=20)
    assert "mcp__notes__echo" in names
    assert len(_pids(pidfile)) == 1 and not _alive(_pids(pidfile)[0])
    with pytest.raises(ProbeFailed, match=r"^command not found: /nonexistent/x$"):
        await probe(home, McpServer(name="ghost", command="/nonexistent/x"), timeout_s=5)
    quitter = McpServer(
        name="quitter",
        command=sys.executable,
        args=["-c", "import sys; sys.stderr.write('missing NOTES_TOKEN\\n'); sys.exit(1)"],
    )
    with pytest.raises(ProbeFailed, match=r"stderr: missing NOTES_TOKEN$"):
        await probe(home, quitter, timeout_s=5)


# --- translation -------------------------------------------------------------------------------


def test_two_servers_of_one_name_are_refused_by_the_config() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="MCP server names must be unique; repeated: notes"):
        McpSettings.model_validate(
            {
                "servers": [
                    {"name": "notes", "command": "notes-mcp"},
                    {"name": "notes", "url": "http://127.0.0.1:9/mcp"},
                ]
            }
        )


def test_tool_names_fit_the_api_and_stay_unique() -> None:
    assert tool_name("notes", "echo") == "mcp__notes__echo"
    odd = tool_name("notes", "read.page/v2 (beta)")
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", odd) and odd.startswith("mcp__notes__read_page")
    long = tool_name("notes", "x" * 100)
    assert len(long) == 64 and long == tool_name("notes", "x" * 100)
    assert tool_name("notes", "x" * 100) != tool_name("notes", "x" * 101)
    # Two remote names that sanitise alike do not collide.
    first = tool_name("notes", "a.b")
    assert tool_name("notes", "a_b", taken={first}) != first


def test_a_schema_with_keywords_the_validator_does_not_know_never_breaks_a_call() -> None:
    from daemon.tools.registry import ToolArgumentError, validate

    wild: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "properties": {
            "anything": True,
            "nothing": False,
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
            "when": {"type": "string", "format": "date-time", "minLength": "ten"},
            "mode": {"anyOf": [{"type": "string"}, {"type": "null"}], "enum": "not-a-list"},
            "odd": {"type": ["string", "datetime"], "maximum": None},
            "weird": {"type": "timestamp"},
            "ref": {"$ref": "#/$defs/Thing"},
        },
        "required": ["pair", 7],
        "$defs": {"Thing": {"type": "object"}},
    }
    schema = portable_schema(wild)
    assert schema["type"] == "object" and schema["$defs"] == wild["$defs"]
    for args in (
        {"pair": ["a", 1], "anything": {"x": 1}, "nothing": 3, "when": "2026-11-24"},
        {"pair": [1, "a"], "mode": "fast", "odd": "x", "weird": 3, "ref": {"a": 1}},
        {"pair": []},
    ):
        validate(schema, args)
    with pytest.raises(ToolArgumentError):
        validate(schema, {"anything": 1})  # `pair` is required
    with pytest.raises(ToolArgumentError):
        validate(schema, {"pair": [], "odd": 5})  # `odd` is still a string
    # Without the conversion, such schemas break the validator with errors no model can read.
    with pytest.raises(AttributeError):
        validate({"properties": {"anything": True}}, {"anything": 1})
    with pytest.raises(AttributeError):
        validate({"properties": {"pair": wild["properties"]["pair"]}}, {"pair": ["a", 1]})
    with pytest.raises(TypeError):
        validate({"properties": {"when": wild["properties"]["when"]}}, {"when": "x"})
    assert portable_schema(None) == {"type": "object", "properties": {}}


def test_results_are_rendered_as_text_with_binary_content_summarised() -> None:
    from mcp import types

    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="Two notes match."),
            types.AudioContent(type="audio", data="A" * 4096, mime_type="audio/wav"),
            types.ResourceLink(type="resource_link", uri="file:///notes/herons.md", name="herons"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///notes/a.md", text="Heron, 7am."),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(
                    uri="file:///notes/b.pdf", blob="A" * 400, mime_type="application/pdf"
                ),
            ),
        ]
    )
    assert render_result("notes", "search", result).splitlines() == [
        "Two notes match.",
        "[audio: audio/wav, 3 KB]",
        "[resource link: file:///notes/herons.md (herons)]",
        "[resource: file:///notes/a.md]",
        "Heron, 7am.",
        "[resource: file:///notes/b.pdf, application/pdf, 300 B]",
    ]
    structured = types.CallToolResult(content=[], structured_content={"count": 2})
    assert json.loads(render_result("notes", "count", structured)) == {"count": 2}
    failed = types.CallToolResult(content=[], is_error=True)
    with pytest.raises(ToolError, match="MCP server 'notes' tool 'count' failed: no details"):
        render_result("notes", "count", failed)


# --- through the real daemon -------------------------------------------------------------------

DAEMON_CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
trunk = ["recall", "mcp__notes__*"]

[mcp]
restart_base_s = 0.2

[[mcp.servers]]
name = "notes"
command = {python}
args = [{fake}]
env = {{ MCP_FAKE_PIDFILE = {pidfile} }}
permission = "allow"
"""
)


def _daemon_status(d: DaemonProcess) -> dict[str, Any]:
    with Client(d.socket_path, timeout=10) as c:
        c.hello()
        data: dict[str, Any] = c.command("status")["data"]
        return data


def _server_state(d: DaemonProcess) -> str | None:
    servers = _daemon_status(d).get("mcp", [])
    return next((s["state"] for s in servers if s["name"] == "notes"), None)


def test_the_daemon_runs_an_mcp_tool_the_model_calls_and_lists_the_server(
    tmp_path: Path, pidfile: Path
) -> None:
    home = tmp_path / "dhome"
    home.mkdir()
    (home / "reverie.toml").write_text(
        DAEMON_CONFIG.format(
            python=json.dumps(sys.executable),
            fake=json.dumps(str(FAKE)),
            pidfile=json.dumps(str(pidfile)),
        )
    )
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool("mcp__notes__echo", {"text": "Seven herons at the lake."}),
            Planned(text="The notes server says: seven herons."),
        )
        d.start()
        try:
            wait_until(lambda: _server_state(d) == "up", 30, "the MCP server up in the daemon")
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                c.send({"type": "message", "text": "Ask the notes server to echo the heron count."})
                frames = c.recv_until(lambda f: f["type"] == "done")
            status = _daemon_status(d)
            shown = run_cli("status", "--home", str(home), env=d.env)
            doctor = run_cli("doctor", "--home", str(home), "--json", env=d.env)
        finally:
            d.stop()
    assert "seven herons" in frames[-1]["text"]
    # The model was offered the server's tools, and read the tool's answer.
    offered = {t["name"] for t in fake.message_requests[0].body.get("tools", [])}
    assert {"mcp__notes__echo", "mcp__notes__add"} <= offered
    second = json.dumps(fake.message_requests[1].body["messages"])
    assert "Seven herons at the lake." in second
    [notes] = status["mcp"]
    assert (notes["name"], notes["state"], notes["restarts"]) == ("notes", "up", 0)
    assert notes["tools"] >= 6
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^mcp: +notes up · \d+ tools$", shown.stdout, re.M), shown.stdout
    # doctor asks the running daemon instead of starting a second copy of the server.
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert checks["mcp notes"]["status"] == "ok"
    assert re.fullmatch(r"up in the daemon: \d+ tools", checks["mcp notes"]["detail"])
    # The daemon stopped its server on the way out (the pidfile fixture checks it is gone).
    assert len(_pids(pidfile)) == 1


def test_doctor_checks_each_server_it_can_start_and_says_why_one_cannot(
    tmp_path: Path, pidfile: Path
) -> None:
    home = tmp_path / "dhome"
    home.mkdir()
    quitter = [
        "-c",
        "import sys; sys.stderr.write('NOTES_TOKEN is not set\\n'); sys.exit(1)",
    ]
    (home / "reverie.toml").write_text(
        f"""
[[mcp.servers]]
name = "notes"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(FAKE))}]
env = {{ MCP_FAKE_PIDFILE = {json.dumps(str(pidfile))} }}

[[mcp.servers]]
name = "ghost"
command = "no-such-mcp-server"

[[mcp.servers]]
name = "quitter"
command = {json.dumps(sys.executable)}
args = {json.dumps(quitter)}

[[mcp.servers]]
name = "web"
url = "ftp://example.org/mcp"

[[mcp.servers]]
name = "resting"
command = "no-such-mcp-server"
enabled = false
"""
    )
    r = run_cli("doctor", "--home", str(home), "--json", env=daemon_env())
    checks = {c["name"]: c for c in json.loads(r.stdout)}
    assert r.returncode == 1
    assert checks["mcp notes"]["status"] == "ok"
    assert re.fullmatch(r"started and answered: \d+ tools", checks["mcp notes"]["detail"])
    assert checks["mcp ghost"] == {
        "name": "mcp ghost",
        "status": "fail",
        "detail": "command 'no-such-mcp-server' is not found on PATH",
        "fix": f"fix [[mcp.servers]] 'ghost' in {home / 'reverie.toml'}",
    }
    assert checks["mcp quitter"]["status"] == "fail"
    assert checks["mcp quitter"]["detail"].startswith("did not start: ")
    assert checks["mcp quitter"]["detail"].endswith("stderr: NOTES_TOKEN is not set")
    assert str(home / "mcp" / "quitter.stderr") in checks["mcp quitter"]["fix"]
    assert checks["mcp web"]["detail"] == "url 'ftp://example.org/mcp' is not an http(s) URL"
    assert checks["mcp resting"]["status"] == "ok" and "disabled" in checks["mcp resting"]["detail"]
    # The server doctor started was stopped again.
    assert len(_pids(pidfile)) == 1
