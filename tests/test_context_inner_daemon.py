"""The real daemon (a subprocess, the fake Messages API for the trunk, the other roles offline):
after a night's sleep the next turn's system prompt carries the dream's reflection, and a long
KNOWLEDGE.md gives the section the message asks about (issue 37)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env, wait_until
from tests.test_context_inner_layers import long_knowledge


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def _report(home: Path, turns: int) -> dict[str, Any]:
    """The layers of the newest turn's recorded context report, once `turns` turns are on record."""

    def rows() -> list[tuple[str]]:
        conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT report FROM turn_reports ORDER BY ts DESC").fetchall()
        finally:
            conn.close()

    wait_until(lambda: len(rows()) >= turns, 20, f"{turns} turn report(s)")
    return {r["name"]: r for r in json.loads(rows()[0][0])["layers"]}


def _system(request: Any) -> str:
    system = request.body.get("system", "")
    if isinstance(system, list):
        return "\n\n".join(str(b.get("text", "")) for b in system)
    return str(system)


def test_the_next_turn_after_a_sleep_reads_the_dream_and_the_knowledge_it_asks_for(
    tmp_path: Path, fake: FakeAnthropic
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(FAKE_API_CONFIG + '\n[scheduler]\ntimezone = "UTC"\n')
    (home / "KNOWLEDGE.md").write_text(long_knowledge(60))
    d = DaemonProcess(
        home=home,
        env=daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
    )
    fake.enqueue(Planned.reply("We decided to feed the sourdough starter twice a day with rye."))
    d.start()
    try:
        with Client(d.socket_path, timeout=30) as c:
            c.hello()
            c.chat("How do I keep my sourdough starter alive? We decided: twice a day, with rye.")
            first = _report(home, 1)
            assert first["reflection"]["tokens"] == 0
            assert first["reflection"]["why"].startswith("not shown: no dream yet")
            started = c.command("sleep")
            assert started["type"] == "result" and started["data"]["started"], started
            wait_until(
                lambda: (
                    c.command("status")["data"]["state"] not in ("asleep", "winding_down")
                    and list((home / "dreams").glob("dream-*.md"))
                ),
                60,
                "the sleep cycle's end and its dream entry",
            )
            entry = next((home / "dreams").glob("dream-*.md")).read_text()
            assert "sourdough starter" in entry
            fake.enqueue(Planned.reply("Dana Reyes services it every October."))
            c.chat("Who services the boiler, and when?")
    finally:
        d.stop()
    system = _system(fake.message_requests[-1])
    # The dream's reflection, delimited as the agent's own data, in the prompt the model got.
    dream = system[system.index("## Your last dream") :]
    assert '<memory kind="reflection" origin="agent" source="dreams/dream-' in dream
    assert "sourdough starter" in dream.split("</memory>")[0]
    # The one section of KNOWLEDGE.md the message asks about, not the shelves around it.
    assert "## Reference notes from your person" in system
    knowledge = re.findall(r'<memory kind="knowledge"[^>]*>\n(.*?)\n</memory>', system, re.S)
    assert knowledge and any("Dana Reyes" in k for k in knowledge)
    assert not any("Shelf" in k for k in knowledge), knowledge
    layers = _report(home, 2)
    assert layers["reflection"]["tokens"] > 0 and layers["knowledge"]["tokens"] > 0
    assert layers["reflection"]["why"].startswith("the agent's own reflection from its last dream")
    assert "chosen by this message (sharing: boiler" in layers["knowledge"]["why"]
