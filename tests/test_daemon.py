"""End-to-end: the real daemon as a subprocess, its real socket, real signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness import REPO, Client, DaemonProcess, daemon_env, run_cli


@pytest.fixture
def daemon(tmp_path: Path):
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env())
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _transcript_records(home: Path) -> list[dict]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return out


def test_chat_streams_and_lands_on_disk_then_sigterm_exits_cleanly(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        hello = c.hello()
        assert hello["type"] == "hello" and hello["state"] == "awake"
        accepted, frames = c.chat("Hello there, who are you?")
    kinds = [f["type"] for f in frames]
    assert "delta" in kinds and kinds[-1] == "done"
    done = frames[-1]
    assert (
        "".join(f["text"] for f in frames if f["type"] == "delta").strip() == done["text"].strip()
    )
    assert "offline" in done["text"].lower()
    recs = _transcript_records(daemon.home)
    user = [r for r in recs if r.get("type") == "message" and r["role"] == "user"]
    assert (
        user
        and user[0]["id"] == accepted["turn_id"]
        and user[0]["content"] == "Hello there, who are you?"
    )
    assert any(
        r.get("type") == "turn_end"
        and r["turn_id"] == accepted["turn_id"]
        and r["status"] == "answered"
        for r in recs
    )

    t0 = time.monotonic()
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    assert time.monotonic() - t0 < 15
    events = daemon.log_events()
    assert any(e.get("event") == "daemon stopped" for e in events)
    # One JSON summary line per turn, carrying the session and turn ids.
    turn_lines = [e for e in events if e.get("event") == "turn finished"]
    assert len(turn_lines) == 1
    assert (
        turn_lines[0]["turn_id"] == accepted["turn_id"]
        and turn_lines[0]["session_id"] == hello["session_id"]
    )
    # session_shutdown fired: the summariser wrote the session's summary file.
    summaries = list((daemon.home / "memory" / "sessions").glob("session-*.md"))
    assert summaries, daemon.logs()
    assert not daemon.socket_path.exists()


def test_restart_resumes_the_same_trunk_session(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        first = c.hello()["session_id"]
        c.chat("first message")
    assert daemon.stop() == 0
    daemon.start()
    with Client(daemon.socket_path) as c:
        assert c.hello()["session_id"] == first
        c.chat("second message")
    assert daemon.stop() == 0
    users = [
        r["content"]
        for r in _transcript_records(daemon.home)
        if r.get("type") == "message" and r["role"] == "user"
    ]
    assert users == ["first message", "second message"]


def test_garbage_oversized_and_half_closed_connections(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        c.send_raw(b"this is not json\n")
        err = c.recv()
        assert err["type"] == "error" and err["code"] == "bad_frame"
        c.send_raw(b"[1, 2, 3]\n")
        assert c.recv()["type"] == "error"
        c.send({"type": "launch_missiles"})
        assert c.recv()["code"] == "unknown_type"
        c.send_raw(b'{"type": "message", "text": "' + b"x" * 2_000_000 + b'"}\n')
        err = c.recv()
        assert err["type"] == "error" and err["code"] == "frame_too_large"
        # The connection is still usable.
        pong = c.command("ping")
        assert pong["type"] == "result" and pong["data"]["pong"] is True
    # Half-closed: send a message, close our write side, still receive the reply.
    with Client(daemon.socket_path) as c:
        c.hello()
        c.send({"type": "message", "text": "half closed hello"})
        c.sock.shutdown(socket.SHUT_WR)
        frames = c.recv_until(lambda f: f.get("type") in ("done", "error") and "turn_id" in f)
        assert frames[-1]["type"] == "done"
    # Vanished client: connect, send, disconnect at once; the daemon keeps serving.
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(str(daemon.socket_path))
    raw.sendall(b'{"type": "message", "text": "gone before the reply"}\n')
    raw.close()
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("still there?")
        assert frames[-1]["type"] == "done"
    assert daemon.stop() == 0


def test_a_client_that_never_reads_does_not_block_others(daemon: DaemonProcess) -> None:
    daemon.start()
    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.connect(str(daemon.socket_path))
    hog.settimeout(5)
    # Flood commands whose answers the hog never reads.
    payload = b"".join(
        b'{"type": "command", "name": "status", "id": "%d"}\n' % i for i in range(3000)
    )
    try:
        hog.sendall(payload)
    except (BlockingIOError, TimeoutError, BrokenPipeError, ConnectionResetError):
        pass
    with Client(daemon.socket_path, timeout=20) as c:
        c.hello()
        t0 = time.monotonic()
        _, frames = c.chat("are you responsive?")
        assert frames[-1]["type"] == "done"
        assert time.monotonic() - t0 < 10
    hog.close()
    assert daemon.stop() == 0


def test_second_daemon_on_the_same_home_is_refused(daemon: DaemonProcess) -> None:
    daemon.start()
    result = run_cli("run", "--home", str(daemon.home), timeout=30)
    assert result.returncode != 0
    assert "already running" in result.stderr
    assert "Traceback" not in result.stderr
    assert daemon.stop() == 0


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[agent]\nmax_tool_steps = 'many'\n", "agent.max_tool_steps"),
        ("[agent]\nmax_tool_stepz = 3\n", "unknown key 'agent.max_tool_stepz'"),
        ("[agent\n", "not valid TOML"),
        ("[models.trunk]\nprovider = 'skynet'\n", "models.trunk.provider"),
    ],
)
def test_bad_config_is_one_clear_line(tmp_path: Path, toml: str, needle: str) -> None:
    home = tmp_path / "home"
    assert run_cli("init", str(home)).returncode == 0
    (home / "reverie.toml").write_text(toml)
    result = run_cli("run", "--home", str(home), timeout=30)
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("how", ["directory", "mode 0"])
def test_unreadable_persona_is_one_clear_line(tmp_path: Path, how: str) -> None:
    home = tmp_path / "home"
    run_cli("init", str(home))
    soul = home / "persona" / "SOUL.md"
    if how == "mode 0":
        if os.geteuid() == 0:
            pytest.skip("root can read files whatever their mode")
        soul.chmod(0)
    else:  # a directory in its place: unreadable for root too, so this case runs everywhere
        soul.unlink()
        soul.mkdir()
    result = run_cli("run", "--home", str(home), timeout=30)
    assert result.returncode == 2
    assert "SOUL.md" in result.stderr and "Traceback" not in result.stderr


def test_undecodable_persona_is_one_clear_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_cli("init", str(home))
    (home / "persona" / "SOUL.md").write_bytes(b"\xff\xfe\xfa not utf-8")
    result = run_cli("run", "--home", str(home), timeout=30)
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "SOUL.md" in lines[0]


def test_chat_cli_one_shot_and_status(daemon: DaemonProcess) -> None:
    daemon.start()
    result = run_cli("chat", "--home", str(daemon.home), "-m", "hello from a script")
    assert result.returncode == 0, result.stderr
    assert "offline" in result.stdout.lower()
    status = run_cli("status", "--home", str(daemon.home), "--json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True and data["state"] == "awake"
    assert data["trunk"]["messages"] >= 2
    assert data["spend"]["calls"] >= 1
    assert daemon.stop() == 0
    offline = json.loads(run_cli("status", "--home", str(daemon.home), "--json").stdout)
    assert offline["running"] is False and offline["trunk"]["messages"] >= 2


def test_chat_cli_fails_cleanly_without_a_daemon(tmp_path: Path) -> None:
    result = run_cli("chat", "--home", str(tmp_path / "nohome"), "-m", "anyone?")
    assert result.returncode != 0
    assert "not running" in result.stderr
    assert "Traceback" not in result.stderr


def test_remember_and_recall_through_the_offline_model(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat(
            "Remember that my sister Ada lives in Lisbon and works as a marine biologist."
        )
        tools = [f for f in frames if f["type"] == "tool"]
        assert any(
            f["name"] == "remember" and f["phase"] == "finished" and not f.get("is_error")
            for f in tools
        ), frames
        _, frames = c.chat("What do you recall about my sister Ada?")
        assert any(f["type"] == "tool" and f["name"] == "recall" for f in frames), frames
        assert "Lisbon" in frames[-1]["text"]
    assert daemon.stop() == 0
    facts = (daemon.home / "memory" / "facts.jsonl").read_text()
    assert "Ada lives in Lisbon" in facts


def test_remember_and_recall_socket_commands(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        stored = c.command(
            "remember", {"text": "the boiler service is booked for 12 March", "target": "memory"}
        )
        assert stored["type"] == "result" and stored["data"]["status"] == "stored", stored
        assert stored["data"]["id"].startswith("fact:")
        again = c.command("remember", {"text": "the boiler service is booked for 12 March"})
        assert again["data"]["status"] == "duplicate"
        recalled = c.command("recall", {"query": "boiler service"})
        assert "12 March" in recalled["data"]["text"]
        bad = c.command("remember", {"text": "  "})
        assert bad["type"] == "error" and bad["code"] == "bad_args"
    assert daemon.stop() == 0


def test_chat_into_a_reader_that_went_away_exits_quietly(daemon: DaemonProcess) -> None:
    daemon.start()
    read_end, write_end = os.pipe()
    os.close(read_end)  # like `reverie chat -m … | head -1` once head has exited
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "chat",
                "-m",
                "hello there",
                "--home",
                str(daemon.home),
            ],
            cwd=REPO,
            env=daemon.env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-800:]
