"""The real daemon while its model's API is down: every client waiting on a queued message is
told promptly (not only the first, and not only at the trunk's next retry), status says the
trunk is waiting for the model, and every kept message is answered once the API is back —
after a restart, and without one."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import REPO, Client, DaemonProcess, daemon_env, run_cli, wait_until


def _config(retry_s: float) -> str:
    return f"""
[providers.anthropic]
max_retries = 0
timeout_s = 30

[agent]
unavailable_retry_s = {retry_s}
unavailable_retry_max_s = {retry_s}
"""


def _cli(
    env: dict[str, str], *args: str, timeout: float = 30
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = run_cli(*args, env=env, timeout=timeout)
    return done, time.monotonic() - started


def _answered(home: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "turn_end" and rec.get("status") == "answered":
                counts[rec["turn_id"]] = counts.get(rec["turn_id"], 0) + 1
    return counts


def _start(
    tmp_path: Path, fake: FakeAnthropic, retry_s: float
) -> tuple[DaemonProcess, dict[str, str]]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(_config(retry_s))
    env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
    return DaemonProcess(home=home, env=env).start(), env


def test_every_chat_client_is_told_at_once_status_says_why_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        fake.outage(Planned.overloaded())
        # The trunk's next retry is 30 s away: whoever is told within seconds was told by the send.
        d, env = _start(tmp_path, fake, retry_s=30)
        home = d.home
        try:
            first, _ = _cli(env, "--home", str(home), "chat", "-m", "first: water the ferns")
            assert first.returncode == 1, (first.stdout, first.stderr)
            assert "model_unavailable" in first.stderr and "saved" in first.stderr
            tries = len(fake.message_requests)
            for text in ("second: the kiln", "third: the ledger"):
                later, took = _cli(env, "--home", str(home), "chat", "-m", text, timeout=60)
                assert later.returncode == 1, (later.stdout, later.stderr)
                assert "model_unavailable" in later.stderr, later.stderr
                assert "saved" in later.stderr and "answered when the model is back" in later.stderr
                assert took < 10, f"told after {took:.1f}s"
            with Client(d.socket_path, timeout=10) as listener:
                listener.hello()
                listener.send({"type": "message", "text": "fourth: still there?", "id": "m4"})
                accepted = listener.recv_until(lambda f: f["type"] == "accepted")[-1]
                told = listener.recv()  # right behind its `accepted`
                assert told["type"] == "error" and told["code"] == "model_unavailable", told
                assert (
                    told["turn_id"] == accepted["turn_id"] and "3 messages ahead" in told["message"]
                )
            assert len(fake.message_requests) == tries, "told by a retry, not at once"

            status, _ = _cli(env, "--home", str(home), "status", "--json")
            trunk = json.loads(status.stdout)["trunk"]
            waiting = trunk["waiting_for_model"]
            assert (
                waiting is not None
                and waiting["attempts"] == 1
                and "overloaded" in waiting["error"].lower()
            )
            assert (
                waiting["queued"] == 4
                and waiting["since"]
                and waiting["next_retry"] > waiting["since"]
            )
            assert trunk["current_turn"] is None and trunk["queued"] == 4
            text, _ = _cli(env, "--home", str(home), "status")
            assert "None" not in text.stdout, text.stdout
            assert (
                "model down:" in text.stdout
                and "4 messages kept, answered when it is back" in text.stdout
            ), text.stdout
            assert "working:      waiting for the model · 4 queued" in text.stdout, text.stdout
            pending = [json.loads(x) for x in (home / "inbox.jsonl").read_text().splitlines()]
            assert [r["text"].split(":")[0] for r in pending if r["op"] == "put"] == [
                "first",
                "second",
                "third",
                "fourth",
            ]
            assert not _answered(home)
        finally:
            assert d.stop() == 0
        fake.outage(None)
        d.start()
        try:
            wait_until(
                lambda: len(_answered(home)) == 4,
                30,
                "all four messages answered after the restart",
            )
            assert set(_answered(home).values()) == {1}
        finally:
            assert d.stop() == 0


def test_a_listening_client_gets_its_reply_once_the_api_is_back(tmp_path: Path) -> None:
    with FakeAnthropic() as fake:
        fake.outage(Planned.overloaded())
        d, env = _start(tmp_path, fake, retry_s=0.5)
        try:
            with Client(d.socket_path, timeout=15) as a, Client(d.socket_path, timeout=15) as b:
                a.hello()
                b.hello()
                a.send({"type": "message", "text": "one: are you there?"})
                turn_a = a.recv_until(lambda f: f["type"] == "accepted")[-1]["turn_id"]
                b.send({"type": "message", "text": "two: and now?"})
                turn_b = b.recv_until(lambda f: f["type"] == "accepted")[-1]["turn_id"]
                for client, turn in ((a, turn_a), (b, turn_b)):
                    told = client.recv_until(
                        lambda f, t=turn: f.get("turn_id") == t and f["type"] in ("error", "done")
                    )[-1]
                    assert told["type"] == "error" and told["code"] == "model_unavailable", told
                wait_until(
                    lambda: json.loads(
                        _cli(env, "--home", str(d.home), "status", "--json")[0].stdout
                    )["trunk"]["waiting_for_model"],
                    10,
                    "waiting",
                )
                fake.outage(None)
                for client, turn, text in (
                    (a, turn_a, "one: are you there?"),
                    (b, turn_b, "two: and now?"),
                ):
                    frames = client.recv_until(
                        lambda f, t=turn: f.get("turn_id") == t and f["type"] in ("error", "done")
                    )
                    assert frames[-1]["type"] == "done" and text in frames[-1]["text"], frames[-1]
                    # Told once per outage, however many retries it took.
                    assert not [f for f in frames if f["type"] == "error"]
            assert _answered(d.home) == {turn_a: 1, turn_b: 1}
            status = json.loads(_cli(env, "--home", str(d.home), "status", "--json")[0].stdout)[
                "trunk"
            ]
            assert status["waiting_for_model"] is None and status["queued"] == 0
        finally:
            assert d.stop() == 0


def test_interactive_chat_shows_the_outage_then_the_kept_reply(tmp_path: Path) -> None:
    with FakeAnthropic() as fake:
        fake.outage(Planned.overloaded())
        d, env = _start(tmp_path, fake, retry_s=0.5)
        chat = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "chat", "--home", str(d.home)],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(
            target=lambda: [lines.put(x) for x in chat.stdout or ()], daemon=True
        )
        reader.start()
        seen: list[str] = []

        def until(needle: str, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not any(needle in x for x in seen):
                left = deadline - time.monotonic()
                assert left > 0, f"no {needle!r} in {seen}"
                try:
                    seen.append(lines.get(timeout=left))
                except queue.Empty:
                    pass

        try:
            assert chat.stdin is not None
            chat.stdin.write("remember the blue kettle\n")
            chat.stdin.flush()
            until("answered when the model is back", 15)
            assert any("error:" in x and "saved" in x for x in seen), seen
            fake.outage(None)
            until("the reply to a message it had kept", 15)
            until("remember the blue kettle", 15)  # the fake echoes the message back
            chat.stdin.close()
            assert chat.wait(15) == 0, seen
        finally:
            if chat.poll() is None:
                chat.kill()
                chat.wait(5)
            assert d.stop() == 0


def test_a_message_sent_once_the_api_is_back_is_not_held_behind_a_long_backoff(
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        fake.outage(Planned.overloaded())
        home = tmp_path / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(
            _config(0.25).replace("unavailable_retry_max_s = 0.25", "unavailable_retry_max_s = 60")
        )
        env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env).start()

        def waiting() -> dict[str, Any] | None:
            out = _cli(env, "--home", str(home), "status", "--json")[0].stdout
            return json.loads(out)["trunk"]["waiting_for_model"]

        try:
            with Client(d.socket_path, timeout=30) as c:
                c.hello()
                c.send({"type": "message", "text": "one: during the outage"})
                first = c.recv_until(lambda f: f["type"] == "accepted")[-1]["turn_id"]
                # The backoff doubles: 0.25, 0.5, 1, 2, 4, 8, then 16 s to the next try — room
                # for two turns' context and reply on a busy machine before it comes.
                wait_until(
                    lambda: (waiting() or {}).get("attempts", 0) >= 7, 40, "seven failed tries"
                )
                next_retry = datetime.fromisoformat(str((waiting() or {})["next_retry"]))
                assert (next_retry - datetime.now(UTC)).total_seconds() > 8
                fake.outage(None)
                c.send({"type": "message", "text": "two: back yet?"})
                second = c.recv_until(lambda f: f["type"] == "accepted")[-1]["turn_id"]
                frames = c.recv_until(lambda f: f["type"] == "done" and f["turn_id"] == second)
                # Answered before the backoff would have let the trunk try again.
                assert datetime.now(UTC) < next_retry
                assert [f["turn_id"] for f in frames if f["type"] == "done"] == [first, second]
                told = [f for f in frames if f["type"] == "error" and f["turn_id"] == second]
                assert told and told[0]["code"] == "model_unavailable"
                assert "trying it again now" in told[0]["message"]
            assert waiting() is None
        finally:
            assert d.stop() == 0
