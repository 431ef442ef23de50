"""`reverie chat -m` whose daemon dies mid-turn: the person hears the message was saved, and it is."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.cli.chat import EXIT_SAVED
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import REPO, DaemonProcess, daemon_env, wait_until


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def _records(home: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def test_chat_m_says_the_message_is_saved_and_the_restarted_daemon_answers_it(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    home = tmp_path / "home"
    env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
    d = DaemonProcess(home=home, env=env)
    fake.enqueue(Planned.delayed(60, text="you will never see this"))
    d.start()
    chat = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "chat", "--home", str(home), "-m", "plan the garden"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: fake.message_requests != [], 20, "the trunk's model request")
        d.kill()
        _, err = chat.communicate(timeout=20)
    finally:
        if chat.poll() is None:
            chat.kill()
        if d.proc and d.proc.poll() is None:
            d.proc.kill()
    assert chat.returncode == EXIT_SAVED, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "your message was saved and will be answered when the daemon is back" in lines[0]

    d.start()
    try:
        wait_until(
            lambda: any(
                r.get("type") == "turn_end" and r.get("status") == "answered"
                for r in _records(home)
            ),
            30,
            "the saved message answered after the restart",
        )
        users = [r["content"] for r in _records(home) if r.get("role") == "user"]
        assert users == ["plan the garden"]
    finally:
        assert d.stop() == 0
