"""Delegate forks through the real daemon: the official Anthropic SDK against the fake Messages
API, the real socket, a real kill in the middle of a fork."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, REPO, Client, DaemonProcess, daemon_env, wait_until

CONFIG = FAKE_API_CONFIG

FRAMING = "You are in focused task mode. Your objective is: "
# Words only the person's message to the trunk contains.
TRUNK_WORDS = ("Quillfeather", "marmalade-tinted")


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    return home


def _forks(home: Path) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM forks ORDER BY started_at")]


def _first_user_text(req: RecordedRequest) -> str:
    first = (req.body.get("messages") or [{}])[0].get("content")
    if isinstance(first, str):
        return first
    return " ".join(b.get("text", "") for b in first or [] if isinstance(b, dict))


def _fork_requests(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.message_requests if _first_user_text(r).startswith(FRAMING)]


def _trunk_records(home: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def test_the_trunk_delegates_and_the_forks_result_comes_back(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool(
                "delegate",
                {
                    "task": "Count the herons at the lake",
                    "context": "Check memory for heron sightings this spring.",
                },
            ),
            # The fork takes a moment: the person writes again meanwhile.
            Planned(
                # The fork thinks aloud before it reports: shown live, a line at a time.
                text="Reading the spring notes first.\nThree entries mention herons.",
                tool_calls=(
                    (
                        "task_complete",
                        {
                            "summary": "Seven herons were sighted at the lake this spring.",
                            "outcome": "success",
                        },
                    ),
                ),
                delay_s=1.5,
                chunk_delay_s=0.02,
            ),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                c.send(
                    {
                        "type": "message",
                        "text": f"{TRUNK_WORDS[0]} here: please delegate the {TRUNK_WORDS[1]} heron count.",
                    }
                )
                first = c.recv_until(lambda f: f["type"] == "accepted")[-1]
                frames = c.recv_until(
                    lambda f: (
                        f["type"] == "tool"
                        and f.get("name") == "fork"
                        and f.get("phase") == "started"
                    )
                )
                started = frames[-1]
                assert (
                    started["depth"] == 1
                    and started["fork_id"].startswith("fork-")
                    and started["turn_id"] == first["turn_id"]
                )
                c.send({"type": "message", "text": "And while it works: hello?"})
                second = c.recv_until(lambda f: f["type"] == "accepted")[-1]
                assert second["queued"] == 1
                rest = c.recv_until(
                    lambda f: f["type"] == "done" and f["turn_id"] == second["turn_id"], limit=5000
                )
                status = c.command("status")["data"]
        finally:
            d.stop()
    everything = frames + rest
    done = [f for f in everything if f["type"] == "done"]
    # Answered in order: the delegating turn first, then the message that waited.
    assert [f["turn_id"] for f in done] == [first["turn_id"], second["turn_id"]]
    assert "Seven herons were sighted at the lake this spring." in done[0]["text"]
    finished = [
        f
        for f in everything
        if f["type"] == "tool" and f.get("name") == "fork" and f.get("phase") == "finished"
    ]
    assert finished and finished[0]["fork_id"] == started["fork_id"] and finished[0]["depth"] == 1
    assert finished[0]["detail"].startswith("complete:")
    # What the fork said, live, as progress under the waiting turn, before it finished.
    said = [
        f
        for f in everything
        if f["type"] == "tool" and f.get("name") == "fork" and f.get("phase") == "progress"
    ]
    assert [f["detail"] for f in said] == [
        "Reading the spring notes first.",
        "Three entries mention herons.",
    ]
    assert all(f["turn_id"] == first["turn_id"] and f["depth"] == 1 for f in said)
    reported = next(
        f
        for f in everything
        if f["type"] == "tool" and f.get("name") == "task_complete" and f.get("phase") == "started"
    )
    assert everything.index(said[-1]) < everything.index(reported)
    # The fork's request: framing and brief, the persona and NEUROLOGY, none of the trunk's words.
    forks = _fork_requests(fake)
    assert len(forks) == 1
    body = json.dumps(forks[0].body)
    assert _first_user_text(forks[0]).startswith(FRAMING + "Count the herons at the lake")
    assert "Check memory for heron sightings this spring." in _first_user_text(forks[0])
    assert "Neurology: how my mind is put together" in body
    for word in TRUNK_WORDS:
        assert word not in body
    assert len(forks[0].body["messages"]) == 1
    tool_names = {t["name"] for t in forks[0].body.get("tools", [])}
    assert {"task_complete", "delegate", "remember", "recall"} <= tool_names
    # Lineage, transcript and status.
    rows = _forks(home)
    assert [(r["status"], r["depth"], r["outcome"]) for r in rows] == [("complete", 1, "success")]
    assert Path(rows[0]["transcript_path"]).parent == home / "sessions" / "forks"
    assert Path(rows[0]["transcript_path"]).exists()
    assert status["forks"]["by_status"] == {"complete": 1} and status["forks"]["running"] == 0


def test_a_crash_in_the_middle_of_a_fork_ends_in_a_clear_failure_after_restart(
    tmp_path: Path,
) -> None:
    home = _home(tmp_path)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool("delegate", {"task": "Sort the photo archive"}),
            Planned(
                text="Sorted 40 of 90 folders so far.",
                tool_calls=(("recall", {"query": "photo archive"}),),
            ),
            Planned.delayed(120, text="never arrives"),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=30) as c:
                c.hello()
                c.send({"type": "message", "text": "Please sort my photo archive."})
                accepted = c.recv_until(lambda f: f["type"] == "accepted")[-1]
                wait_until(
                    lambda: len(_fork_requests(fake)) >= 2, 30, "the fork's second model call"
                )
            d.kill()
        finally:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
        assert [r["status"] for r in _forks(home)] == ["running"]
        # After the restart the same message is answered again; its delegate call gets the failure.
        fake.enqueue(Planned.tool("delegate", {"task": "Sort the photo archive"}))
        before = len(fake.message_requests)
        d.start()
        try:

            def answered() -> bool:
                return any(
                    r.get("type") == "turn_end"
                    and r.get("turn_id") == accepted["turn_id"]
                    and r.get("status") == "answered"
                    for r in _trunk_records(home)
                )

            wait_until(answered, 30, "the interrupted turn answered after the restart")
            after = fake.message_requests[before:]
        finally:
            d.stop()
    rows = _forks(home)
    assert [(r["status"], r["reported"]) for r in rows] == [("failed", 1)]
    assert "interrupted" in rows[0]["stop_reason"]
    results = [
        r
        for r in _trunk_records(home)
        if r.get("type") == "tool_result" and r.get("turn_id") == accepted["turn_id"]
    ]
    assert results and results[-1]["is_error"]
    assert (
        "The fork failed: interrupted: the daemon stopped while this fork was running"
        in results[-1]["content"]
    )
    assert "Sorted 40 of 90 folders so far." in results[-1]["content"]
    # No fork was started again behind the person's back: only the trunk's two calls.
    assert len(after) == 2 and not any(_first_user_text(r).startswith(FRAMING) for r in after)
    fork_records = [
        json.loads(line) for line in Path(rows[0]["transcript_path"]).read_text().splitlines()
    ]
    assert fork_records[-1]["type"] == "turn_end" and fork_records[-1]["status"] == "failed"


def test_with_no_key_the_offline_model_delegates_and_the_fork_reports_from_memory(
    tmp_path: Path,
) -> None:
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env())
    d.start()
    try:
        with Client(d.socket_path, timeout=30) as c:
            c.hello()
            c.chat("Remember that the kiln in the garden shed is named Bartholomew.")
            _, frames = c.chat("Please delegate: find what we know about the kiln")
    finally:
        d.stop()
    done = frames[-1]
    assert done["type"] == "done", frames[-3:]
    assert (
        "The delegate tool returned: [fork fork-" in done["text"]
        and "· complete · outcome partial]" in done["text"]
    )
    assert "Offline model: no language model is configured" in done["text"]
    assert "Bartholomew" in done["text"]
    phases = [(f["name"], f["phase"], f.get("depth")) for f in frames if f["type"] == "tool"]
    assert ("fork", "started", 1) in phases and ("fork", "finished", 1) in phases
    assert ("recall", "started", 1) in phases and ("task_complete", "finished", 1) in phases
    rows = _forks(d.home)
    assert [(r["status"], r["outcome"]) for r in rows] == [("complete", "partial")]
    # The database lost, `memory reindex` brings the lineage back from the fork transcripts.
    for f in d.home.glob("reverie.db*"):
        f.unlink()
    r = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "memory", "reindex", "--home", str(d.home)],
        cwd=REPO,
        env=daemon_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "forks=1" in r.stdout, r.stdout + r.stderr
    assert _forks(d.home) == rows


def test_stopping_the_daemon_mid_fork_cancels_it_cleanly(tmp_path: Path) -> None:
    home = _home(tmp_path)
    with FakeAnthropic() as fake:
        d = DaemonProcess(
            home=home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
        )
        fake.enqueue(
            Planned.tool("delegate", {"task": "Read the long report"}),
            Planned.delayed(120, text="never arrives"),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=30) as c:
                c.hello()
                c.send({"type": "message", "text": "Please read the long report."})
                c.recv_until(
                    lambda f: (
                        f["type"] == "tool"
                        and f.get("name") == "fork"
                        and f.get("phase") == "started"
                    )
                )
                wait_until(lambda: len(_fork_requests(fake)) == 1, 30, "the fork at the model")
            started = time.monotonic()
            assert d.stop() == 0
            took = time.monotonic() - started
        finally:
            if d.proc and d.proc.poll() is None:
                d.proc.kill()
    assert took < 15
    rows = _forks(home)
    assert [r["status"] for r in rows] == ["cancelled"]
    records = [
        json.loads(line) for line in Path(rows[0]["transcript_path"]).read_text().splitlines()
    ]
    assert records[-2]["type"] == "turn_end" and records[-2]["status"] == "cancelled"
    # The transcript records how the fork ended (what `memory reindex` rebuilds the row from).
    assert records[-1]["type"] == "fork_end" and records[-1]["status"] == "cancelled"
