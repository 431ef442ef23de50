"""The chat client helpers and `reverie chat`, against a real server with a scripted handler."""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

import daemon.cli
from daemon.chat import protocol
from daemon.chat.client import ChatClient, ChatError, command, send_message
from daemon.chat.server import ChatServer
from daemon.chat.stream import UnixListener
from daemon.chat.testing import ScriptedChatHandler, ScriptedTurn
from daemon.cli.chat import EXIT_SAVED

pytestmark = pytest.mark.anyio

# Only this part's subcommands: the test must not depend on other systems' modules.
CLI_WRAPPER = "import sys, daemon.cli as c; c.COMMAND_MODULES = ('daemon.cli.chat',); sys.exit(c.main(sys.argv[1:]))"


@asynccontextmanager
async def daemon_at(path: Path, **kwargs: Any) -> AsyncIterator[ScriptedChatHandler]:
    commands = kwargs.pop(
        "commands",
        {
            "status": lambda args: {"state": "awake", "args": args},
            "sleep": lambda args: {"started": True},
        },
    )
    async with (
        ScriptedChatHandler(commands=commands, **kwargs) as handler,
        anyio.create_task_group() as tg,
    ):
        server = ChatServer(path, handler, max_frame_bytes=65536, queue_frames=256, allow_uids=())
        await tg.start(server.serve)
        yield handler
        tg.cancel_scope.cancel()


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "run" / "reverie.sock"


@pytest.fixture
def quiet_logs() -> Iterator[io.StringIO]:
    """Send the server's log lines aside, so stdout holds only what the CLI printed."""
    saved = structlog.get_config()
    sink = io.StringIO()
    structlog.configure(**{**saved, "logger_factory": structlog.PrintLoggerFactory(file=sink)})
    yield sink
    structlog.configure(**saved)


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, sock: Path, home_dir: Path, quiet_logs: io.StringIO
) -> Path:
    monkeypatch.setattr(daemon.cli, "COMMAND_MODULES", ("daemon.cli.chat",))
    monkeypatch.delenv("REVERIE_SOCKET", raising=False)
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    # The socket comes from the home's own config: proof that --home is honoured.
    with (home_dir / "reverie.toml").open("a") as fh:
        fh.write(f'\n[chat]\nsocket = "{sock}"\n')
    return home_dir


# --- helpers ---------------------------------------------------------------------------


async def test_command_returns_the_result_data(sock: Path) -> None:
    with anyio.fail_after(5):
        async with daemon_at(sock) as handler:
            assert await command(sock, "status", {"verbose": True}) == {
                "state": "awake",
                "args": {"verbose": True},
            }
            assert await command(sock, "sleep") == {"started": True}
            assert len(handler.seen.frames) == 2


async def test_command_raises_the_daemons_error(sock: Path) -> None:
    with anyio.fail_after(5):
        async with daemon_at(sock):
            with pytest.raises(ChatError) as info:
                await command(sock, "dance")
    assert info.value.code == "unknown_command"
    assert "no command 'dance'" in info.value.message


async def test_command_times_out_with_a_clear_error(sock: Path) -> None:
    class Silent(ScriptedChatHandler):
        async def handle_frame(self, client: Any, frame: Any) -> None:
            pass  # swallows everything, answers nothing

    with anyio.fail_after(5):
        async with Silent() as handler, anyio.create_task_group() as tg:
            server = ChatServer(sock, handler, max_frame_bytes=4096, queue_frames=16, allow_uids=())
            await tg.start(server.serve)
            with pytest.raises(ChatError, match=r"did not answer 'status' within 0.3s"):
                await command(sock, "status", timeout=0.3)
            tg.cancel_scope.cancel()


async def test_no_socket_means_not_running(sock: Path) -> None:
    with anyio.fail_after(5), pytest.raises(ChatError) as info:
        await command(sock, "status")
    assert str(info.value) == (
        f"the daemon is not running (no socket at {sock}); start it with `reverie run`"
        " (or `./scripts/run-daemon.sh` in a checkout)"
    )


async def test_a_stale_socket_means_not_running(sock: Path) -> None:
    import socket

    sock.parent.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))
    dead.close()
    with anyio.fail_after(5), pytest.raises(ChatError, match="the daemon is not running"):
        await send_message(sock, "hi", lambda f: None, timeout=5)


async def test_send_message_streams_the_turn_and_returns_done(sock: Path) -> None:
    frames: list[dict[str, Any]] = []
    with anyio.fail_after(5):
        async with daemon_at(
            sock, turn=ScriptedTurn(chunks=("one ", "two"), tools=("recall",))
        ) as handler:
            done = await send_message(sock, "count", frames.append, timeout=5)
    assert done["type"] == "done" and done["text"] == "one two"
    kinds = [f["type"] for f in frames]
    assert kinds == ["accepted", "tool", "tool", "delta", "delta", "done"]
    assert "".join(f["text"] for f in frames if f["type"] == "delta") == "one two"
    assert [type(f).__name__ for _, f in handler.seen.frames] == ["MessageFrame"]


async def test_send_message_raises_on_the_turns_error(sock: Path) -> None:
    turn = ScriptedTurn(error_code="model_unavailable", error_message="the model API is down")
    with anyio.fail_after(5):
        async with daemon_at(sock, turn=turn):
            with pytest.raises(ChatError) as info:
                await send_message(sock, "hi", lambda f: None, timeout=5)
    assert info.value.code == "model_unavailable"
    assert info.value.message == "the model API is down (model_unavailable)"


async def test_send_message_raises_on_a_rejected_frame(sock: Path) -> None:
    with anyio.fail_after(5):
        async with daemon_at(sock):
            with pytest.raises(ChatError) as info:
                await send_message(sock, "   ", lambda f: None, timeout=5)
    assert info.value.code == "bad_frame"


async def test_client_keeps_the_greeting_and_can_be_driven_by_hand(sock: Path) -> None:
    with anyio.fail_after(5):
        async with daemon_at(sock), ChatClient.connect(sock) as client:
            assert client.hello == {
                "type": "hello",
                "version": "test",
                "state": "awake",
                "session_id": "session-test",
            }
            with pytest.raises(ChatError, match=r"no answer from the daemon within 0\.05s"):
                await client.receive(timeout=0.05)
            await client.send({"type": "command", "name": "sleep", "id": "x"})
            assert (await client.receive(timeout=2))["data"] == {"started": True}


async def test_frames_iterator_ends_when_the_daemon_goes(sock: Path) -> None:
    got: list[str] = []
    with anyio.fail_after(5):
        async with ScriptedChatHandler(commands={"ping": lambda a: 1}) as handler:
            async with anyio.create_task_group() as tg:
                server = ChatServer(
                    sock, handler, max_frame_bytes=4096, queue_frames=16, allow_uids=()
                )
                await tg.start(server.serve)
                client_cm = ChatClient.connect(sock)
                client = await client_cm.__aenter__()
                await client.send({"type": "command", "name": "ping", "id": "1"})
                while not handler.seen.frames:
                    await anyio.sleep(0.005)
                await anyio.sleep(0.1)  # let the writer put the answer on the wire
                tg.cancel_scope.cancel()
        try:
            # What was sent before the daemon stopped arrives, then the iterator ends.
            async for frame in client.frames():
                got.append(frame["type"])
        finally:
            await client_cm.__aexit__(None, None, None)
    assert got == ["result"]


async def test_a_refusal_on_connect_is_a_chat_error(tmp_path: Path) -> None:
    path = tmp_path / "fake.sock"
    listener = UnixListener.bind(path, mode=0o600)

    async def refuse() -> None:
        conn = await listener.accept()
        async with conn:
            await conn.send(
                protocol.encode(protocol.error("forbidden", "uid 1000 may not talk to this daemon"))
            )

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(refuse)
                with pytest.raises(ChatError) as info:
                    async with ChatClient.connect(path):
                        pass  # pragma: no cover
    finally:
        listener.close()
    assert info.value.code == "forbidden"
    assert "may not talk" in info.value.message


# --- `reverie chat` --------------------------------------------------------------------


async def run_cli(argv: list[str]) -> int:
    return await anyio.to_thread.run_sync(daemon.cli.main, argv)


async def test_chat_m_streams_the_reply_to_stdout(
    sock: Path, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with anyio.fail_after(10):
        async with daemon_at(
            sock, turn=ScriptedTurn(chunks=("Hel", "lo", " there"), tools=("recall",))
        ) as handler:
            code = await run_cli(["chat", "--home", str(cli_env), "-m", "hi there"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "Hello there\n"
    assert err == ""  # tool notes only go to a terminal
    assert [f.text for _, f in handler.seen.frames] == ["hi there"]  # type: ignore[union-attr]


async def test_chat_m_reads_the_message_from_stdin(
    sock: Path, cli_env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("a message\nover two lines\n"))
    with anyio.fail_after(10):
        async with daemon_at(sock) as handler:
            code = await run_cli(["chat", "--home", str(cli_env), "-m", "-"])
    assert code == 0
    assert capsys.readouterr().out == "Hello, world.\n"
    assert handler.seen.frames[0][1].text == "a message\nover two lines\n"  # type: ignore[union-attr]


async def test_chat_m_error_frame_is_one_line_and_nonzero(
    sock: Path, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    turn = ScriptedTurn(error_code="spend_cap", error_message="today's spend cap is reached")
    with anyio.fail_after(10):
        async with daemon_at(sock, turn=turn):
            code = await run_cli(["chat", "--home", str(cli_env), "-m", "hi"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    assert err == "reverie: today's spend cap is reached (spend_cap)\n"


async def test_chat_m_whose_daemon_dies_after_accepting_says_the_message_is_saved(
    sock: Path, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = ScriptedTurn(chunks=("The ", "reply ", "never ", "ends"), pause_s=0.2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            codes: list[int] = []

            async def chat() -> None:
                codes.append(await run_cli(["chat", "--home", str(cli_env), "-m", "hi"]))

            async with daemon_at(sock, turn=slow) as handler:
                tg.start_soon(chat)
                while not handler.seen.frames:
                    await handler.frame_arrived.wait()
                await anyio.sleep(0.3)  # the reply has begun
            # The daemon is gone mid-reply.
    out, err = capsys.readouterr()
    assert codes == [EXIT_SAVED]
    assert out.startswith("The ")
    line = err.strip()
    assert "\n" not in line
    assert "your message was saved and will be answered when the daemon is back" in line


async def test_chat_m_whose_daemon_dies_before_accepting_says_it_may_be_lost(
    tmp_path: Path, cli_env: Path, sock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sock.parent.mkdir(parents=True, exist_ok=True)
    listener = UnixListener.bind(sock, mode=0o600)

    async def greet_then_vanish() -> None:
        conn = await listener.accept()
        async with conn:
            await conn.send(
                protocol.encode(protocol.hello(version="t", state="awake", session_id="s"))
            )
            await conn.receive()  # the message arrives; the daemon dies before saving it

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(greet_then_vanish)
                code = await run_cli(["chat", "--home", str(cli_env), "-m", "hi"])
    finally:
        listener.close()
    assert code == 1
    err = capsys.readouterr().err
    assert "before confirming your message; it may not have been saved" in err


async def test_chat_m_without_a_daemon(
    sock: Path, cli_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with anyio.fail_after(10):
        code = await run_cli(["chat", "--home", str(cli_env), "-m", "hi"])
    err = capsys.readouterr().err
    assert code == 1
    assert (
        err == f"reverie: the daemon is not running (no socket at {sock}); start it with"
        " `reverie run` (or `./scripts/run-daemon.sh` in a checkout)\n"
    )


async def test_chat_finds_the_user_units_socket(
    tmp_path: Path,
    home_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    quiet_logs: io.StringIO,
) -> None:
    monkeypatch.setattr(daemon.cli, "COMMAND_MODULES", ("daemon.cli.chat",))
    monkeypatch.delenv("REVERIE_SOCKET", raising=False)
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    runtime = tmp_path / "xdg"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    unit_socket = runtime / "reverie" / "reverie.sock"
    with anyio.fail_after(10):
        async with daemon_at(unit_socket):
            code = await run_cli(["chat", "--home", str(home_dir), "-m", "hi"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == "Hello, world.\n"
    assert f"using the systemd unit's {unit_socket}" in err


def _cli_env(sock: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "REVERIE_HOME")}
    env["REVERIE_SOCKET"] = str(sock)
    env["REVERIE_LOG_LEVEL"] = "warning"
    return env


async def test_interactive_chat_over_a_pipe(sock: Path, home_dir: Path) -> None:
    script = "hello\n\n/status\n/bogus\n//slash message\n/help\n"
    with anyio.fail_after(20):
        async with daemon_at(sock, turn=ScriptedTurn(chunks=("Hi", "!"))) as handler:
            done = await anyio.run_process(
                [sys.executable, "-c", CLI_WRAPPER, "chat", "--home", str(home_dir)],
                input=script.encode(),
                env=_cli_env(sock),
                check=False,
            )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "Hi!"
    assert (
        "state:        awake" in out and '"state": "awake"' not in out
    )  # the status view, not raw JSON
    assert "[unknown command /bogus (try /help)]" in out
    assert "/status" in out and "Ctrl-C during a reply cancels the turn" in out  # the help
    texts = [f.text for _, f in handler.seen.frames if type(f).__name__ == "MessageFrame"]  # type: ignore[union-attr]
    assert texts == ["hello", "/slash message"]
    assert not (home_dir / ".chat_history").exists()  # no readline history off a terminal


async def test_ctrl_c_cancels_the_turn_in_flight(sock: Path, home_dir: Path) -> None:
    turn = ScriptedTurn(chunks=tuple(f"w{i} " for i in range(200)), pause_s=0.05)
    with anyio.fail_after(20):
        async with daemon_at(sock, turn=turn) as handler:
            async with await anyio.open_process(
                [sys.executable, "-c", CLI_WRAPPER, "chat", "--home", str(home_dir), "-m", "go on"],
                env=_cli_env(sock),
            ) as proc:
                assert proc.stdout is not None and proc.stderr is not None
                first = await proc.stdout.receive()
                assert first.startswith(b"w0")
                proc.send_signal(signal.SIGINT)
                rest = b""
                async for chunk in proc.stdout:
                    rest += chunk
                err = b"".join([chunk async for chunk in proc.stderr]).decode()
                code = await proc.wait()
            cancels = [f for _, f in handler.seen.frames if type(f).__name__ == "CancelFrame"]
    assert code == 130, err
    assert "the turn was cancelled (cancelled)" in err
    assert len(cancels) == 1 and cancels[0].turn_id  # type: ignore[attr-defined]
    assert (first + rest).count(b"w") < 200  # it stopped early
