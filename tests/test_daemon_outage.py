"""The real daemon while its model's API is down: every client waiting on a queued message is
told promptly (not only the first), status says the trunk is waiting for the model, and every
kept message is answered once the API is back — without a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import REPO, Client, DaemonProcess, daemon_env

CONFIG = """
[providers.anthropic]
max_retries = 0
timeout_s = 30

[agent]
unavailable_retry_s = 0.5
unavailable_retry_max_s = 1.0
"""


def _cli(env: dict[str, str], *args: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    return done, time.monotonic() - started


def _answered(home: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "turn_end" and rec.get("status") == "answered":
                counts[rec["turn_id"]] = counts.get(rec["turn_id"], 0) + 1
    return counts


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_every_queued_message_hears_of_the_outage_and_is_answered_when_the_api_is_back(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    with FakeAnthropic() as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        fake.outage(Planned.overloaded())
        d = DaemonProcess(home=home, env=env).start()
        try:
            with Client(d.socket_path, timeout=15) as listener:
                listener.hello()
                # The first message: its own turn fails at the model.
                first, took = _cli(env, "--home", str(home), "chat", "-m", "first: water the ferns")
                assert first.returncode == 1, (first.stdout, first.stderr)
                assert "model_unavailable" in first.stderr and "saved" in first.stderr
                # Every later message waits behind it; each client is told at once, not left hanging.
                for text in ("second: the kiln", "third: the ledger"):
                    later, took = _cli(env, "--home", str(home), "chat", "-m", text)
                    assert later.returncode == 1, (later.stdout, later.stderr)
                    assert "model_unavailable" in later.stderr, later.stderr
                    assert "saved" in later.stderr and "answered when the model is back" in later.stderr
                    assert took < 10, f"told after {took:.1f}s"
                # A client that stays connected hears of the outage, then gets its reply later.
                listener.send({"type": "message", "text": "fourth: still there?", "id": "m4"})
                accepted = listener.recv_until(lambda f: f["type"] == "accepted")[-1]
                told = listener.recv_until(lambda f: f["type"] in ("error", "done") and f.get("turn_id") == accepted["turn_id"])[-1]
                assert told["type"] == "error" and told["code"] == "model_unavailable", told
                assert "3 messages ahead" in told["message"]

                status, _ = _cli(env, "--home", str(home), "status", "--json")
                trunk = json.loads(status.stdout)["trunk"]
                waiting = trunk["waiting_for_model"]
                assert waiting is not None and waiting["attempts"] >= 1 and "overloaded" in waiting["error"].lower()
                assert waiting["queued"] == 4 and waiting["since"]
                text, _ = _cli(env, "--home", str(home), "status")
                assert "None" not in text.stdout, text.stdout
                assert "model down:" in text.stdout and "4 message(s) kept" in text.stdout, text.stdout
                assert "waiting for the model" in text.stdout or "working:      turn turn-" in text.stdout
                pending = [json.loads(x) for x in (home / "inbox.jsonl").read_text().splitlines()]
                assert [r["text"].split(":")[0] for r in pending if r["op"] == "put"] == ["first", "second", "third", "fourth"]
                assert not _answered(home)

                fake.outage(None)
                done = listener.recv_until(lambda f: f["type"] in ("done", "error") and f.get("turn_id") == accepted["turn_id"])[-1]
                assert done["type"] == "done" and "fourth: still there?" in done["text"], done
            _wait(lambda: len(_answered(home)) == 4, 20, "all four messages answered")
            assert set(_answered(home).values()) == {1}
            status, _ = _cli(env, "--home", str(home), "status", "--json")
            trunk = json.loads(status.stdout)["trunk"]
            assert trunk["waiting_for_model"] is None and trunk["queued"] == 0
            text, _ = _cli(env, "--home", str(home), "status")
            assert "model down" not in text.stdout
        finally:
            assert d.stop() == 0
