"""Who gets which tools, through the real daemon: the trunk is offered its configured set, a
fork what it was granted, and a fork can never grant a tool it does not hold itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env

CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
trunk = ["recall", "delegate"]
fork = ["recall", "remember", "correct", "retract"]
"""
)


def _offered(req: RecordedRequest) -> set[str]:
    return {t["name"] for t in req.body.get("tools") or []}


def _tool_results(req: RecordedRequest) -> list[dict[str, Any]]:
    out = []
    for m in req.body.get("messages") or []:
        if isinstance(m.get("content"), list):
            out += [b for b in m["content"] if b.get("type") == "tool_result"]
    return out


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(c.get("text", "") for c in content)
    return str(content)


def test_a_fork_holds_what_it_was_granted_and_grants_no_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    with FakeAnthropic() as fake:
        fake.enqueue(
            # The trunk narrows its fork to two of the forks' tools.
            Planned.tool("delegate", {"task": "Look it up", "tools": ["recall", "remember"]}),
            # The fork tries to give its own fork a tool it was not granted.
            Planned.tool("delegate", {"task": "Fix a fact", "tools": ["recall", "correct"]}),
            Planned.tool("task_complete", {"summary": "Nothing found.", "outcome": "partial"}),
            Planned(text="The fork found nothing."),
        )
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                c.send({"type": "message", "text": "Please look something up."})
                c.recv_until(lambda f: f["type"] in ("done", "error"))
        finally:
            d.stop()
        trunk, fork_first, fork_second, trunk_after = fake.message_requests[:4]

    # The trunk is offered its configured set, not the forks'.
    assert _offered(trunk) == {"recall", "delegate"}
    # The fork holds exactly its grant (and the delegate tools of any session below the limit).
    assert _offered(fork_first) == {"recall", "remember", "delegate", "task_complete"}
    refusal = _tool_results(fork_second)[-1]
    assert refusal.get("is_error") is True
    assert "cannot grant correct" in _text(refusal)
    assert "Fix a fact" not in str(trunk_after.body)
