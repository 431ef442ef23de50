"""The journal tools in real turns: the official Anthropic SDK against the fake Messages API, the
real daemon and socket — the trunk and a fork it starts are offered them, each writes an entry
in its own session's name, and the trunk reads both back as labelled data."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env

JOURNAL_TOOLS = {"add_journal_entry", "list_journal_entries", "journal_status"}


def _tools(req: RecordedRequest) -> set[str]:
    return {t["name"] for t in req.body.get("tools", [])}


def _tool_results(req: RecordedRequest) -> list[str]:
    out: list[str] = []
    for message in req.body.get("messages", []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = " ".join(b.get("text", "") for b in inner if isinstance(b, dict))
                out.append(str(inner))
    return out


def _entries(home: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((home / "journal").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def test_the_trunk_and_its_fork_write_entries_and_the_trunk_reads_them_back(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(FAKE_API_CONFIG)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool(
                "add_journal_entry",
                {
                    "summary": "Agreed with the person to count the herons at Wrenmere lake.",
                    "decisions": ["count on Saturday morning"],
                    "tags": ["herons"],
                },
            ),
            Planned.tool("delegate", {"task": "Count the herons in the spring notes"}),
            # The fork:
            Planned.tool(
                "add_journal_entry", {"summary": "Counted seven herons in the spring notes."}
            ),
            Planned.tool("task_complete", {"summary": "Seven herons.", "outcome": "success"}),
            # The trunk again:
            Planned.tool("list_journal_entries", {"last": 5}),
            Planned(text="Both notes are in the journal."),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                _, frames = c.chat("Let's plan the heron count at Wrenmere lake.")
                assert frames[-1]["type"] == "done", frames[-1]
                assert frames[-1]["text"] == "Both notes are in the journal."
                trunk_session = c.command("status")["data"]["trunk"]["session_id"]
        finally:
            d.stop()
        requests = fake.message_requests
    assert len(requests) == 6
    assert JOURNAL_TOOLS <= _tools(requests[0])  # the trunk's
    assert JOURNAL_TOOLS <= _tools(requests[2])  # the fork's
    with sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True) as conn:
        (fork_id,) = conn.execute("SELECT id FROM forks").fetchone()
    entries = _entries(home)
    # The two the agent wrote, the fork tree's own note (what delegate reports), and the
    # journal's entry when the session ended at the stop.
    assert [e["trigger"] for e in entries] == ["agent", "agent", "note", "shutdown"], entries
    trunk_entry, fork_entry, _note, _ = entries
    assert trunk_entry["session"] == trunk_session and fork_entry["session"] == fork_id
    assert trunk_entry["source"] == fork_entry["source"] == "agent"
    assert trunk_entry["decisions"] == ["count on Saturday morning"]
    # The fork's receipt names its own session; the trunk's listing reads both back as data.
    assert any(fork_id in r for r in _tool_results(requests[3]))
    listing = _tool_results(requests[5])[-1]
    assert listing.startswith('<journal_entries scope="last 5" count="3">')
    assert listing.endswith("</journal_entries>")
    assert f"[{trunk_entry['id']}] (journal, agent)" in listing
    assert f"session {fork_id}" in listing and "Counted seven herons" in listing
    assert f"[{_note['id']}] (journal, system)" in listing and "a system's note" in listing
