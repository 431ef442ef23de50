"""End-to-end on PostgreSQL: the real daemon, its home's `[storage] url` naming a real server."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from daemon.paths import Home
from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.postgres_server import pg_server, pg_url  # noqa: F401


def pg_home(root: Path, url: str, name: str = "Reverie") -> Path:
    home = Home(root)
    home.ensure()
    (home.root / "reverie.toml").write_text(
        f'[agent]\nname = "{name}"\n\n[storage]\nurl = "{url}"\n'
    )
    return home.root


@pytest.fixture
def daemon(tmp_path: Path, pg_url: str):  # noqa: F811
    d = DaemonProcess(home=pg_home(tmp_path / "home", pg_url), env=daemon_env())
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def test_a_daemon_on_postgresql_answers_remembers_and_searches(
    daemon: DaemonProcess,
    pg_url: str,  # noqa: F811
) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        _, frames = c.chat("Hello there, my sister Ana moved to Porto last week.")
    assert frames[-1]["type"] == "done"
    home = str(daemon.home)
    r = run_cli("remember", "the boiler is serviced every March", "--home", home, "--json")
    assert r.returncode == 0, r.stderr
    r = run_cli("memory", "search", "boiler serviced", "--home", home, "--json")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    hits = hits.get("results", hits) if isinstance(hits, dict) else hits
    assert any("boiler" in h["text"] for h in hits)
    assert daemon.stop() == 0
    # What the daemon stored is on the server, in the agent's own schema, and nowhere else.
    assert not (daemon.home / "reverie.db").exists()
    with psycopg.connect(pg_url) as conn:
        facts = conn.execute(
            "SELECT text FROM agent_reverie.memories WHERE kind = 'fact'"
        ).fetchall()
        said = conn.execute(
            "SELECT content FROM agent_reverie.messages WHERE role = 'user'"
        ).fetchall()
    assert ("the boiler is serviced every March",) in facts
    assert any("Ana moved to Porto" in s[0] for s in said)


def test_a_daemon_on_postgresql_sleeps_a_whole_cycle(
    daemon: DaemonProcess,
    pg_url: str,  # noqa: F811
) -> None:
    daemon.start()
    with Client(daemon.socket_path) as c:
        c.hello()
        c.chat("remember that the boiler service is due in April")
        c.chat("My neighbour Tomas is lending us his ladder. Should we paint the fence first?")
    out = run_cli("sleep", "--wait", "--home", str(daemon.home), timeout=120)
    assert out.returncode == 0, out.stderr + daemon.logs()
    assert "wind_down" in out.stdout and "wake_up" in out.stdout and "done" in out.stdout
    wake = (daemon.home / "WAKE.md").read_text()
    assert "boiler service is due in April" in wake
    assert daemon.stop() == 0
    with psycopg.connect(pg_url) as conn:
        phases = conn.execute(
            "SELECT phase, status FROM agent_reverie.sleep_phases ORDER BY seq"
        ).fetchall()
    assert phases and all(status in ("done", "skipped", "deferred") for _, status in phases)
    assert ("maintenance", "done") in phases or any(p == "maintenance" for p, _ in phases)
    errors = [e for e in daemon.log_events() if e.get("level") == "error"]
    assert not errors, errors[:3]
