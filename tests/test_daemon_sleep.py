"""The sleep cycle in the real daemon: `sleep` through the socket, SIGKILL mid-cycle, restart resumes;
`reverie sleep --wait` and `reverie status` from the command line."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import Client, DaemonProcess, daemon_env, run_cli, wait_until

CONFIG = """
[providers.anthropic]
max_retries = 1
backoff_base_s = 0.05
backoff_max_s = 0.1
timeout_s = 120

[scheduler]
timezone = "UTC"
nightly_sleep = "03:30"
"""

LETTER = "# Wake-up notes\n\n## Where things stand\n- Porto in May is settled; Ada (Lisbon) may host us.\n"
SUMMARY = {
    "title": "Planning the Porto trip",
    "slug": "porto-trip-may-ada",
    "tags": ["travel"],
    "summary": "The person settled on Porto for May and mentioned that Ada lives in Lisbon.",
    "decisions": ["Porto in May"],
}


class RoutedFake(FakeAnthropic):
    """The fake Messages API, with replies planned per kind of request (by a marker in its system
    prompt), so the journal's and the dreams' own calls do not take the sleep cycle's replies."""

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[str, deque[Planned]] = {}

    def route(self, marker: str, *plans: Planned) -> None:
        self.routes.setdefault(marker, deque()).extend(plans)

    def _take(self, body: dict[str, Any]) -> Planned:
        system = json.dumps(body.get("system", ""))
        with self._lock:
            for marker, plans in self.routes.items():
                if marker in system and plans:
                    return plans.popleft()
        return super()._take(body)


@pytest.fixture
def fake():
    with RoutedFake() as server:
        yield server


def _rows(home: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _records(home: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(dict(json.loads(line), _file=path.stem))
    return out


def _weave_requests(fake: FakeAnthropic) -> list[Any]:
    return [
        r for r in fake.message_requests if "Write WAKE.md" in json.dumps(r.body.get("system", ""))
    ]


@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_sleep_through_the_socket_survives_a_stop_mid_cycle_and_resumes_after_restart(
    tmp_path: Path, fake: RoutedFake, stop: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    d = DaemonProcess(
        home=home,
        env=daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
    )
    fake.enqueue(Planned.reply("Porto in May it is."))
    d.start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("we settled on Porto for May; my sister Ada lives in Lisbon")
            old = _rows(home, "SELECT value FROM kv WHERE key = 'trunk_session'")[0][0].strip('"')
            # The summary comes back at once; the letter never does (the daemon is killed first).
            fake.route("session summaries", Planned.reply(json.dumps(SUMMARY)))
            fake.route("Write WAKE.md", Planned.delayed(120, text="never delivered"))
            started = c.command("sleep")
            assert started["type"] == "result" and started["data"]["started"], started
            cycle_id = started["data"]["cycle_id"]
            wait_until(lambda: _weave_requests(fake), 20, "the wake-up letter's model call")
            status = c.command("status")["data"]
            assert (
                status["state"] == "asleep"
                and status["phase"] == "wake_up"
                and status["trunk"]["held"]
            )
            assert status["sleep"]["running"]["cycle_id"] == cycle_id and status["next_sleep"]
            # A message during sleep is accepted (on disk) but not answered before the wake-up.
            c.send({"type": "message", "text": "are you awake?"})
            waiting = c.recv_until(lambda f: f["type"] == "accepted")[-1]
        if stop == "sigkill":
            d.kill()
        else:
            # A graceful stop mid-cycle: the cycle is cancelled, not finished, and exits cleanly.
            d.signal(signal.SIGTERM)
            assert d.wait(30) == 0
    finally:
        if d.proc and d.proc.poll() is None:
            d.proc.kill()
    assert _rows(home, "SELECT status FROM sleep_cycles WHERE id = ?", (cycle_id,)) == [
        ("running",)
    ]
    assert _rows(
        home, "SELECT phase, status FROM sleep_phases WHERE cycle_id = ? ORDER BY seq", (cycle_id,)
    ) == [
        ("wind_down", "done"),
        ("mining", "done"),
        ("maintenance", "done"),
        ("dreams", "done"),
        ("wake_up", "running"),
    ]
    assert waiting["turn_id"] in (home / "inbox.jsonl").read_text()

    fake.route("Write WAKE.md", Planned.reply(LETTER))
    d.start()
    try:
        wait_until(
            lambda: (
                _rows(home, "SELECT status FROM sleep_cycles WHERE id = ?", (cycle_id,))
                == [("done",)]
            ),
            30,
            "the resumed cycle",
        )
        phases = _rows(
            home,
            "SELECT phase, status, attempts FROM sleep_phases WHERE cycle_id = ? ORDER BY seq",
            (cycle_id,),
        )
        assert phases == [
            ("wind_down", "done", 1),
            ("mining", "done", 1),
            ("maintenance", "done", 1),
            ("dreams", "done", 1),
            ("wake_up", "done", 2),
            # A message waited for the wake-up: the optional self-exam is left to the next night.
            ("self_exam", "deferred", 0),
        ]
        ((new, resumed, woke_early),) = _rows(
            home,
            "SELECT new_session_id, resumed, woke_early FROM sleep_cycles WHERE id = ?",
            (cycle_id,),
        )
        assert resumed == 1 and woke_early == 1 and new != old
        # Exactly one switch, linked to the old session; the letter is the model's.
        assert _rows(home, "SELECT id FROM sessions WHERE previous_id = ?", (old,)) == [(new,)]
        assert (home / "WAKE.md").read_text() == LETTER
        assert len(_weave_requests(fake)) == 2
        # The message that waited is answered once, in the new session; nothing is left pending.
        wait_until(
            lambda: any(
                r.get("type") == "turn_end" and r.get("turn_id") == waiting["turn_id"]
                for r in _records(home)
            ),
            20,
            "the waiting message",
        )
        ends = [
            r["_file"]
            for r in _records(home)
            if r.get("type") == "turn_end" and r.get("turn_id") == waiting["turn_id"]
        ]
        assert ends == [new]
        logs = [e.get("event") for e in d.log_events()]
        assert "a sleep cycle was interrupted by a restart; it will resume" in logs
        assert logs.count("sleep cycle finished") == 1
        with Client(d.socket_path) as c:
            c.hello()
            status = c.command("status")["data"]
            assert status["state"] == "awake" and status["sleep"]["last"]["cycle_id"] == cycle_id
            assert status["trunk"]["session_id"] == new and not status["trunk"]["held"]
    finally:
        assert d.stop() == 0


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--home", str(home), timeout=120)


def test_reverie_sleep_wait_and_status_from_the_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("remember that the boiler service is due in April")
            c.chat("My neighbour Tomas is lending us his ladder. Should we paint the fence first?")
        out = _cli(home, "sleep", "--wait")
        assert out.returncode == 0, out.stderr
        assert "wind_down" in out.stdout and "wake_up" in out.stdout and "done" in out.stdout
        wake = (home / "WAKE.md").read_text()
        assert "boiler service is due in April" in wake and "Tomas is lending us his ladder" in wake
        assert "Should we paint the fence first?" in wake
        # `status` shows the last sleep and the next one.
        status = _cli(home, "status")
        assert (
            status.returncode == 0
            and "last sleep:" in status.stdout
            and "next sleep:" in status.stdout
        )
        data = json.loads(_cli(home, "status", "--json").stdout)
        assert data["sleep"]["last"]["reason"] == "manual" and data["state"] == "awake"
    finally:
        assert d.stop() == 0
    # With the daemon down, status reads the last cycle and the next run from the store.
    data = json.loads(_cli(home, "status", "--json").stdout)
    assert (
        data["running"] is False
        and data["sleep"]["last"]["reason"] == "manual"
        and data["next_sleep"]
    )


def test_a_message_sent_with_the_sleep_command_is_answered_before_sleeping(
    tmp_path: Path,
) -> None:
    """The review's repro: `sleep` and a message at once on one connection (offline model).

    The message reaches the trunk before the cycle's hold, so it is answered in the old
    session, before sleeping, and does not cut the sleep short (nothing deferred)."""
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("We decided to bake sourdough on Sundays.")
            old = _rows(home, "SELECT value FROM kv WHERE key = 'trunk_session'")[0][0].strip('"')
            c.send_raw(
                (
                    json.dumps({"type": "command", "name": "sleep", "args": {}, "id": "c-sleep"})
                    + "\n"
                    + json.dumps({"type": "message", "text": "are you awake?"})
                    + "\n"
                ).encode()
            )
            frames = c.recv_until(lambda f: f["type"] == "state" and f["state"] == "asleep")
            frames += c.recv_until(lambda f: f["type"] == "state" and f["state"] == "awake")
            accepted = next(f for f in frames if f["type"] == "accepted")
            done = [f for f in frames if f["type"] == "done"]
            assert done and done[0]["turn_id"] == accepted["turn_id"], frames
            # The reply came before the agent fell asleep.
            kinds = [(f["type"], f.get("state")) for f in frames]
            assert kinds.index(("done", None)) < kinds.index(("state", "asleep"))
            woke = frames[-1]
            assert "woke early" not in woke.get("detail", "") and "deferred" not in woke.get(
                "detail", ""
            ), woke
        ends = [
            r["_file"]
            for r in _records(home)
            if r.get("type") == "turn_end" and r.get("turn_id") == accepted["turn_id"]
        ]
        assert ends == [old]
        ((woke_early, deferred),) = _rows(
            home, "SELECT woke_early, deferred FROM sleep_cycles WHERE session_id = ?", (old,)
        )
        assert woke_early == 0 and json.loads(deferred) == []
        cycle = _rows(home, "SELECT id FROM sleep_cycles WHERE session_id = ?", (old,))[0][0]
        assert _rows(
            home, "SELECT phase, status FROM sleep_phases WHERE cycle_id = ? ORDER BY seq", (cycle,)
        ) == [
            ("wind_down", "done"),
            ("mining", "done"),
            ("maintenance", "done"),
            ("dreams", "done"),
            ("wake_up", "done"),
            ("self_exam", "done"),
        ]
    finally:
        assert d.stop() == 0


def test_the_sleep_cycle_archives_old_fork_transcripts(tmp_path: Path) -> None:
    import anyio

    from daemon.paths import Home
    from daemon.store.db import Database
    from tests.test_delegate_retention import _fork

    home = Home(tmp_path / "home")
    home.ensure()

    async def prepare() -> Path:
        async with await Database.open(home.db_file) as db:
            return await _fork(db, home, "fork-old", age_days=60, kilobytes=2)

    old = anyio.run(prepare)
    d = DaemonProcess(home=home.root, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            done = c.command("sleep", {"wait": True})
            assert done["type"] == "result", done
    finally:
        assert d.stop() == 0
    assert not old.exists() and (home.forks_dir / "archive" / "fork-old.jsonl.gz").exists()
