"""The journal through the real daemon: chat, heartbeat, status, /journal, shutdown, restart, context."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO, Client, DaemonProcess, daemon_env, run_cli, wait_until


@pytest.fixture
def daemon(tmp_path: Path):
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env())
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _entries(home: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((home / "journal").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _configure(home: Path, heartbeat_minutes: float) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "reverie.toml").write_text(f"[journal]\nheartbeat_minutes = {heartbeat_minutes}\n")


def test_chat_heartbeat_restart_and_the_digest_is_in_the_next_sessions_context(
    daemon: DaemonProcess,
) -> None:
    home = daemon.home
    _configure(home, 0.02)  # a heartbeat every 1.2 s
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("Remember that the kiln Bartholomew-9 is glazed in cobalt blue.")
        assert frames[-1]["type"] == "done"
        wait_until(
            lambda: any(e["trigger"] == "heartbeat" for e in _entries(home)),
            20,
            "a heartbeat entry",
        )
        (entry,) = _entries(home)
        assert "Bartholomew-9" in entry["summary"] and entry["source"] == "extractive"
        assert entry["session"] == c.command("status")["data"]["trunk"]["session_id"]
        # Idle: more heartbeats run their check and write nothing.
        time.sleep(3.0)
        status = c.command("status")["data"]
        assert len(_entries(home)) == 1
        assert status["last_heartbeat"] and status["jobs"]["heartbeat"]["runs"] >= 2
        assert "nothing new" in status["last_heartbeat_result"]
        assert (
            status["journal"]["last_entry"] == entry["ts"]
            and status["journal"]["entries_today"] == 1
        )
        assert (
            status["spend"]["calls"] >= 1
        )  # the chat turn; the offline journal makes no model call
        calls = status["spend"]["calls"]
        journal = c.command("journal", {"tail": 5})
        assert journal["type"] == "result" and "Bartholomew-9" in journal["data"]["text"]
        bad = c.command("journal", {"tail": "many"})
        assert bad["type"] == "error" and bad["code"] == "bad_args"
        assert c.command("status")["data"]["spend"]["calls"] == calls
    assert daemon.stop() == 0
    text = run_cli("status", "--home", str(home)).stdout
    assert "heartbeat" in text

    # Restart with a slow heartbeat: the shutdown entry comes from session_shutdown, not a tick.
    _configure(home, 60)
    context = json.loads(
        run_cli("context", "--home", str(home), "--prompt", "what next?", "--json").stdout
    )
    journal_block = next(b for b in context["blocks"] if b["layer"] == "journal")
    assert "Bartholomew-9" in journal_block["text"] and 'kind="journal"' in journal_block["text"]
    assert 'origin="agent"' in journal_block["text"] and "</memory>" in journal_block["text"]
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("Next, let's plan the firing schedule for the cobalt pieces.")
        assert frames[-1]["type"] == "done"
        # The turn's context carried the digest (the journal layer of the turn report).
        layers = c.command("status")["data"]["context"]["last_turn"]["layers"]
        assert layers["journal"] > 0
        daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    entries = _entries(home)
    assert [e["trigger"] for e in entries] == ["heartbeat", "shutdown"]
    assert "firing schedule" in entries[-1]["summary"]
    digest = next((home / "journal").glob("*.md")).read_text()
    assert digest.index("firing schedule") < digest.index("Bartholomew-9")  # newest first
    hits = json.loads(
        run_cli("memory", "search", "firing schedule", "--json", "--home", str(home))
        .stdout.strip()
        .splitlines()[-1]
    )
    assert any(h["kind"] == "journal" and "firing schedule" in h["text"] for h in hits), hits
    # The index is rebuilt from the files, journal entries included.
    reindexed = run_cli("memory", "reindex", "--home", str(home))
    assert reindexed.returncode == 0 and "journal=2" in reindexed.stdout, reindexed.stderr
    hits = json.loads(
        run_cli(
            "memory", "search", "Bartholomew-9", "--kind", "journal", "--json", "--home", str(home)
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert hits and all(h["kind"] == "journal" for h in hits)


@pytest.mark.skipif(sys.platform != "linux", reason="pty + SO_PEERCRED are Linux here")
def test_slash_journal_in_the_interactive_client(daemon: DaemonProcess) -> None:
    import os
    import pty

    from tests.test_chat_interactive import _read_until

    home = daemon.home
    (home / "journal").mkdir(parents=True)
    rows = [
        {
            "ts": "2026-03-02T09:00:00+00:00",
            "summary": "Sorted the seed packets by sowing month.",
            "session": "trunk-a",
        },
        {
            "ts": "2026-03-02T10:00:00+00:00",
            "summary": "Chose Thursdays for the kiln firing.",
            "decisions": ["Thursdays at 10"],
        },
    ]
    (home / "journal" / "2026-03-02.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    daemon.start()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(REPO)
        os.execve(
            sys.executable,
            [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home)],
            daemon.env,
        )
    seen = bytearray()
    try:
        at = _read_until(fd, b"> ", 20, seen)
        os.write(fd, b"/journal 1\r")
        at = _read_until(fd, b"Chose Thursdays for the kiln firing.", 20, seen, at)
        at = _read_until(fd, b"decided: Thursdays at 10", 20, seen, at)
        assert b"Sorted the seed packets" not in seen
        at = _read_until(fd, b"> ", 20, seen, at)
        os.write(fd, b"/journal\r")
        at = _read_until(fd, b"Sorted the seed packets by sowing month.", 20, seen, at)
        _read_until(fd, b"> ", 20, seen, at)  # back at the prompt, where Ctrl-D leaves
        os.write(fd, b"\x04")
    finally:
        os.waitpid(pid, 0)
        os.close(fd)


def test_status_never_claims_a_heartbeat_that_failed(daemon: DaemonProcess) -> None:
    import shutil

    home = daemon.home
    _configure(home, 0.02)
    daemon.start()
    # The journal folder is replaced by a file: every entry the heartbeat tries fails.
    shutil.rmtree(home / "journal")
    (home / "journal").write_text("not a folder")
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("Something happened worth a journal entry.")
        assert frames[-1]["type"] == "done"
        wait_until(
            lambda: c.command("status")["data"]["jobs"]["heartbeat"].get("last_status") == "failed",
            20,
            "a failed heartbeat",
        )
        status = c.command("status")["data"]
        assert status["last_heartbeat"] is None
        assert "heartbeat handler(s) failed" in status["jobs"]["heartbeat"]["last_result"]
        # Put it right: the next heartbeat writes the entry it could not write before.
        (home / "journal").unlink()
        (home / "journal").mkdir()
        wait_until(
            lambda: any(True for _ in (home / "journal").glob("*.jsonl")),
            20,
            "the entry after the repair",
        )
        wait_until(
            lambda: c.command("status")["data"]["last_heartbeat"] is not None,
            20,
            "a heartbeat that did its check",
        )
    assert daemon.stop() == 0
    assert "Something happened" in next((home / "journal").glob("*.jsonl")).read_text()
