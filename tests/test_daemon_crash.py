"""The real daemon against the real Anthropic SDK and a local fake Messages API:
SIGKILL mid-turn loses nothing, and an API outage keeps the message queued."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import Client, DaemonProcess, daemon_env, wait_until

FAST_RETRIES = """
[providers.anthropic]
max_retries = 1
backoff_base_s = 0.05
backoff_max_s = 0.1
timeout_s = 60

[agent]
unavailable_retry_s = 0.5
unavailable_retry_max_s = 1.0
"""


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


def _daemon(tmp_path: Path, fake: FakeAnthropic) -> DaemonProcess:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(FAST_RETRIES)
    env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
    return DaemonProcess(home=home, env=env)


def _records(home: Path) -> list[dict]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def _trunk_requests(fake: FakeAnthropic) -> list:
    return [r for r in fake.message_requests if r.body.get("tools")]


def test_sigkill_mid_turn_then_restart_answers_every_acknowledged_message(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    d = _daemon(tmp_path, fake)
    fake.enqueue(Planned.delayed(60, text="you will never see this"))
    d.start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.send({"type": "message", "text": "first: plan the garden"})
            first = c.recv_until(lambda f: f["type"] == "accepted")[-1]
            c.send({"type": "message", "text": "second: and the shed"})
            second = c.recv_until(lambda f: f["type"] == "accepted")[-1]
            assert second["queued"] == 1
            wait_until(lambda: len(_trunk_requests(fake)) >= 1, 20, "the trunk's model request")
        d.kill()
    finally:
        if d.proc and d.proc.poll() is None:
            d.proc.kill()
    # Both acknowledged messages are on disk after the kill.
    inbox = (d.home / "inbox.jsonl").read_text()
    assert first["turn_id"] in inbox and second["turn_id"] in inbox

    d.start()
    try:

        def answered() -> set[str]:
            return {
                r["turn_id"]
                for r in _records(d.home)
                if r.get("type") == "turn_end" and r.get("status") == "answered"
            }

        wait_until(
            lambda: {first["turn_id"], second["turn_id"]} <= answered(),
            30,
            "both turns answered after restart",
        )
        users = [r for r in _records(d.home) if r.get("type") == "message" and r["role"] == "user"]
        assert [u["content"] for u in users] == ["first: plan the garden", "second: and the shed"]
        replies = [
            r for r in _records(d.home) if r.get("type") == "message" and r["role"] == "assistant"
        ]
        assert {r["turn_id"] for r in replies} == {first["turn_id"], second["turn_id"]}
        # The replayed first turn did not see its own user message twice.
        last_first = [
            r
            for r in _trunk_requests(fake)
            if "plan the garden" in json.dumps(r.body["messages"][-1])
        ][-1]
        texts = json.dumps(last_first.body["messages"])
        assert texts.count("first: plan the garden") == 1
    finally:
        assert d.stop() == 0


def test_api_outage_keeps_the_message_queued_and_answers_when_back(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    d = _daemon(tmp_path, fake)
    d.start()
    try:
        for _ in range(4):
            fake.enqueue(Planned.overloaded())
        with Client(d.socket_path, timeout=30) as c:
            c.hello()
            c.send({"type": "message", "text": "are you there?"})
            accepted = c.recv_until(lambda f: f["type"] == "accepted")[-1]
            err = c.recv_until(lambda f: f["type"] in ("error", "done"))[-1]
            assert err["type"] == "error" and err["code"] == "model_unavailable"
            assert "saved" in err["message"]
            frames = c.recv_until(
                lambda f: f["type"] == "done" and f["turn_id"] == accepted["turn_id"]
            )
            assert frames[-1]["text"]
        ledger_rows = [r for r in fake.message_requests]
        assert len(ledger_rows) >= 5
    finally:
        assert d.stop() == 0


def test_prompt_cache_breakpoint_and_usage_are_recorded(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    d = _daemon(tmp_path, fake)
    d.start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("hello")
            c.chat("hello again")
            status = c.command("status")["data"]
        trunk = _trunk_requests(fake)
        system = trunk[-1].body["system"]
        assert isinstance(system, list) and any("cache_control" in b for b in system)
        assert status["spend"]["cache_read_tokens"] > 0
        assert 0 < status["spend"]["cache_hit_rate"] <= 1
    finally:
        assert d.stop() == 0


def test_spend_cap_stops_the_trunk_and_says_so(tmp_path: Path, fake: FakeAnthropic) -> None:
    d = _daemon(tmp_path, fake)
    (d.home / "reverie.toml").write_text(FAST_RETRIES + "\n[spend]\ndaily_cap_usd = 0.000001\n")
    d.start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            _, frames = c.chat("first one is allowed")
            assert frames[-1]["type"] == "done"
            _, frames = c.chat("second one is over the cap")
            assert frames[-1]["type"] == "error" and frames[-1]["code"] == "spend_cap"
            assert "daily spend cap" in frames[-1]["message"]
            status = c.command("status")["data"]
            assert status["spend"]["cost_usd"] > 0
    finally:
        assert d.stop() == 0


def test_persona_and_topic_edits_apply_on_the_next_turn_without_restart(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    d = _daemon(tmp_path, fake)
    d.start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("hello")
            soul = d.home / "persona" / "SOUL.md"
            soul.write_text(soul.read_text() + "\n\nYou keep a pet axolotl named Quillon-7.\n")

            def system_text() -> str:
                return json.dumps(_trunk_requests(fake)[-1].body["system"])

            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                c.chat("anything new?")
                if "Quillon-7" in system_text():
                    break
                time.sleep(0.3)
            assert "Quillon-7" in system_text()
    finally:
        assert d.stop() == 0
