"""Lifecycle seams through the real daemon: state frames and status, a session switch, a crash
between hold and switch, after-turn indexing, and status that tells the truth."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import Client, DaemonProcess, daemon_env, run_cli, wait_until


@pytest.fixture
def daemon(tmp_path: Path):
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env())
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _records(home: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(dict(json.loads(line), _file=path.stem))
            except json.JSONDecodeError:
                pass
    return out


def _kv(home: Path, key: str) -> Any:
    with sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True) as conn:
        row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    return json.loads(row[0]) if row else None


def test_switch_command_summarises_the_old_session_and_status_tells_the_truth(
    daemon: DaemonProcess,
) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        assert c.hello()["state"] == "awake"
        accepted, _ = c.chat("Please note the kiln is named Bartholomew-9.")
        status = c.command("status")["data"]
        old = status["trunk"]["session_id"]
        assert status["state"] == "awake" and status["state_since"]
        # No embedder in this daemon (REVERIE_EMBEDDER=none): search is lexical, and says so.
        assert status["vector_search"] is False and status["embedder"] == "none"
        # The journal keeps the heartbeat; it has not run yet, so no heartbeat is claimed.
        assert status["last_heartbeat"] is None and status["next_heartbeat"]
        assert "heartbeat" in status["jobs"] and "nightly_sleep" in status["jobs"]
        assert "checkpoint" in status["jobs"]
        switched = c.command("switch", {"reason": "fresh start"})
        assert switched["type"] == "result", switched
        new = switched["data"]["session_id"]
        assert switched["data"]["previous_id"] == old and new != old
        # The fresh session has replayed nothing: the old session's turn is not shown as its use.
        fresh = c.command("status")["data"]["context"]
        assert fresh["used_tokens"] == 0 and fresh["last_turn"] is None
        _, frames = c.chat("hello again")
        assert frames[-1]["type"] == "done"
        after = c.command("status")["data"]
        assert after["trunk"]["session_id"] == new
        assert (
            after["context"]["used_tokens"] > 0
            and after["context"]["last_turn"]["session_id"] == new
        )
    # The after-turn indexing made the turn searchable without a restart.
    hits = json.loads(
        run_cli("memory", "search", "Bartholomew-9", "--json", "--home", str(daemon.home))
        .stdout.strip()
        .splitlines()[-1]
    )
    assert any(accepted["turn_id"] in h["message_ids"] for h in hits), hits
    # session_before_switch made the summariser write the outgoing session's summary.
    wait_until(
        lambda: any(
            old in p.read_text() for p in (daemon.home / "memory" / "sessions").glob("session-*.md")
        ),
        20,
        "the old session's summary",
    )
    header = next(r for r in _records(daemon.home) if r.get("type") == "session" and r["id"] == new)
    assert header["continues"] == old and header["reason"] == "fresh start"
    text = run_cli("status", "--home", str(daemon.home)).stdout
    assert (
        "lexical only" in text
        and "heartbeat:    last none yet, next " in text
        and "next sleep:" in text
    )
    with Client(daemon.socket_path) as c:
        c.hello()
        daemon.signal(signal.SIGTERM)
        frames = c.recv_until(lambda f: f.get("type") == "state")
        assert frames[-1]["state"] == "stopping" and frames[-1]["previous"] == "awake"
    assert daemon.wait(30) == 0


FAST = """
[providers.anthropic]
max_retries = 1
backoff_base_s = 0.05
backoff_max_s = 0.1
timeout_s = 60
"""


def test_a_crash_between_hold_and_switch_loses_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(FAST)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(Planned.delayed(60, text="never seen"))
        d.start()
        try:
            with Client(d.socket_path, timeout=30) as c, Client(d.socket_path, timeout=30) as admin:
                c.hello()
                admin.hello()
                c.send({"type": "message", "text": "first: a long job"})
                first = c.recv_until(lambda f: f["type"] == "accepted")[-1]
                wait_until(
                    lambda: any(r.body.get("tools") for r in fake.message_requests),
                    20,
                    "the first turn at the model",
                )
                old = _kv(home, "trunk_session")
                admin.send(
                    {"type": "command", "name": "switch", "args": {"reason": "night"}, "id": "sw"}
                )
                wait_until(lambda: _kv(home, "trunk_switch") is not None, 10, "the switch intent")
                # Held: a message is still accepted (on disk) while the first turn runs.
                c.send({"type": "message", "text": "second: during the hold"})
                second = c.recv_until(lambda f: f["type"] == "accepted")[-1]
                assert second["turn_id"] in (home / "inbox.jsonl").read_text()
            d.kill()
        finally:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
        assert _kv(home, "trunk_session") == old
        fake.enqueue("answer to the first", "answer to the second")
        d.start()
        try:

            def answered() -> dict[str, str]:
                return {
                    r["turn_id"]: r["_file"]
                    for r in _records(home)
                    if r.get("type") == "turn_end" and r.get("status") == "answered"
                }

            wait_until(
                lambda: {first["turn_id"], second["turn_id"]} <= set(answered()),
                30,
                "both answered after restart",
            )
            new = _kv(home, "trunk_session")
            assert new != old and _kv(home, "trunk_switch") is None
            assert answered()[second["turn_id"]] == new and answered()[first["turn_id"]] == new
            header = next(
                r for r in _records(home) if r.get("type") == "session" and r["id"] == new
            )
            assert header["continues"] == old and header["reason"] == "night"
            # The old session kept the interrupted message, unanswered; nothing was answered twice.
            ends = [
                r
                for r in _records(home)
                if r.get("type") == "turn_end" and r.get("status") == "answered"
            ]
            assert len(ends) == 2
        finally:
            assert d.stop() == 0
