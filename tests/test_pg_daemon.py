"""End-to-end on PostgreSQL: the real daemon, its home's `[storage] url` naming a real server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from bench.memory_search import write_transcript
from daemon.paths import Home
from tests.harness import REPO, Client, DaemonProcess, daemon_env, run_cli
from tests.postgres_server import DedicatedServer, dedicated_pg, pg_server, pg_url  # noqa: F401


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
    # With the daemon stopped, the commands that read the store read the server's.
    listed = run_cli("sleep", "list", "--home", str(daemon.home))
    assert listed.returncode == 0 and "manual" in listed.stdout, listed.stderr
    facts = run_cli("memory", "facts", "--home", str(daemon.home))
    assert facts.returncode == 0 and "boiler service is due in April" in facts.stdout


def _search(home: Path, query: str) -> list[str]:
    r = run_cli("memory", "search", query, "--home", str(home), "--json")
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    hits = hits.get("results", hits) if isinstance(hits, dict) else hits
    return [h["text"] for h in hits]


def chat_and_import(
    ada: DaemonProcess, bob: DaemonProcess, *, lines: int, turns: int, bob_asks: str
) -> None:
    """Both daemons import a history of `lines` messages and answer `turns` messages each,
    all at once, on the one server."""
    for who, seed in ((ada, 1), (bob, 2)):
        write_transcript(who.home.parent / f"{who.home.name}.jsonl", lines, seed=seed)
    imports = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "daemon.cli", "memory", "import"),
                *(str(who.home.parent / f"{who.home.name}.jsonl"), "--home", str(who.home)),
            ],
            cwd=REPO,
            env=daemon_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who in (ada, bob)
    ]
    with Client(ada.socket_path) as a, Client(bob.socket_path) as b:
        a.hello()
        b.hello()
        for n in range(turns):
            a.send({"type": "message", "text": f"Where did we put the spare key? ({n})"})
            b.send({"type": "message", "text": f"{bob_asks} ({n})"})
        for c in (a, b):
            finished = 0
            while finished < turns:
                finished += c.recv().get("type") == "done"
    for p in imports:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err


def test_two_agents_on_one_database_share_what_is_shared_and_nothing_else(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    ada = DaemonProcess(home=pg_home(tmp_path / "ada", pg_url, "Ada"), env=daemon_env())
    bob = DaemonProcess(home=pg_home(tmp_path / "bob", pg_url, "Bob"), env=daemon_env())
    try:
        ada.start()
        bob.start()
        private = "the spare key is under the blue flower pot"
        shared = "the household wifi password is written on the fridge"
        r = run_cli("remember", private, "--home", str(ada.home), "--json")
        assert r.returncode == 0, r.stderr
        r = run_cli("remember", "--shared", shared, "--home", str(ada.home), "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["id"].startswith("shared:")
        # Both import a history and chat at once, on the one server.
        chat_and_import(ada, bob, lines=400, turns=3, bob_asks="What is the wifi password?")
        for who in (ada, bob):
            with psycopg.connect(pg_url) as conn:
                schema = f"agent_{who.home.name}"
                imported = conn.execute(
                    f"SELECT count(*) FROM {schema}.messages m JOIN {schema}.sessions s "
                    "ON s.id = m.session_id WHERE s.kind = 'imported'"
                ).fetchone()
                said = conn.execute(
                    f"SELECT count(*) FROM {schema}.messages WHERE role = 'user' AND "
                    "(content LIKE 'Where did we put%' OR content LIKE 'What is the wifi%')"
                ).fetchone()
            assert imported is not None and imported[0] == 400, who.home.name
            assert said is not None and said[0] == 3, who.home.name
        assert private in _search(ada.home, "spare key flower pot")
        assert shared in _search(ada.home, "wifi password fridge")
        assert shared in _search(bob.home, "wifi password fridge")
        assert not any("flower pot" in t for t in _search(bob.home, "spare key flower pot"))
        r = run_cli("recall", "where is the spare key?", "--home", str(bob.home), "--json")
        assert r.returncode == 0, r.stderr
        assert "flower pot" not in r.stdout
        # Sharing needs the shared namespace: a SQLite home says so.
        plain = Home(tmp_path / "plain")
        plain.ensure()
        r = run_cli("remember", "--shared", shared, "--home", str(plain.root))
        assert r.returncode != 0 and "PostgreSQL" in r.stderr
    finally:
        for d in (ada, bob):
            if d.proc is not None and d.proc.poll() is None:
                assert d.stop() == 0


def test_a_sqlite_home_moves_to_postgresql_and_the_daemon_finds_the_same_memories(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env())
    d.start()
    facts = [
        "the boiler is serviced every March",
        "my sister Ana lives in Porto and works as an architect",
        "the allotment plot number is 42 by the north gate",
    ]
    try:
        for f in facts:
            assert run_cli("remember", f, "--home", str(home)).returncode == 0
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("We planted tomatoes and basil at the allotment today.")
        asked = dict(
            zip(
                ("boiler serviced", "sister Porto architect", "allotment plot gate"),
                facts,
                strict=True,
            )
        )
        before = {q: _search(home, q)[:3] for q in asked}
        assert all(asked[q] in hits for q, hits in before.items())
        r = run_cli("memory", "migrate", "--to", pg_url, "--home", str(home))
        assert r.returncode != 0 and "stop the daemon" in r.stderr
    finally:
        assert d.stop() == 0
    r = run_cli("memory", "migrate", "--to", pg_url, "--home", str(home), "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and report["counts"]["memories"][0] == report["counts"]["memories"][1] > 3
    assert report["found_after"] >= report["found_before"] > 0
    # Pointed at the server, the daemon answers from the copied store.
    (home / "reverie.toml").write_text(f'[storage]\nurl = "{pg_url}"\n')
    d = DaemonProcess(home=home, env=daemon_env())
    d.start()
    try:
        for q in asked:
            assert asked[q] in _search(home, q)[:3], q
        assert run_cli("remember", "the bins go out at dawn", "--home", str(home)).returncode == 0
        assert "the bins go out at dawn" in _search(home, "bins dawn")
    finally:
        assert d.stop() == 0
    # Rebuilt from the files alone, the server's index finds them again.
    r = run_cli("memory", "reindex", "--home", str(home), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "the boiler is serviced every March" in _search(home, "boiler serviced")


def test_doctor_checks_the_server_pgvector_and_the_schema_version(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    def storage_checks(home: Path) -> dict[str, dict[str, str]]:
        r = run_cli("doctor", "--json", "--home", str(home))
        return {c["name"]: c for c in json.loads(r.stdout) if c["name"].startswith("storage")}

    home = pg_home(tmp_path / "home", pg_url)
    fresh = storage_checks(home)
    assert fresh["storage.server"]["status"] == "ok"
    assert fresh["storage.pgvector"]["status"] in ("ok", "warn")
    assert (
        fresh["storage.schema"]["status"] == "warn"
        and "not created" in fresh["storage.schema"]["detail"]
    )
    d = DaemonProcess(home=home, env=daemon_env())
    d.start()
    assert d.stop() == 0
    ready = storage_checks(home)
    assert ready["storage.pgvector"]["status"] == "ok"
    assert (
        ready["storage.schema"]["status"] == "ok"
        and "agent_reverie" in ready["storage.schema"]["detail"]
    )
    away = pg_home(tmp_path / "away", "postgresql://nobody@/nowhere?host=/nonexistent")
    gone = storage_checks(away)
    assert (
        gone["storage.server"]["status"] == "fail"
        and "cannot reach" in gone["storage.server"]["detail"]
    )
    plain = Home(tmp_path / "plain")
    plain.ensure()
    assert storage_checks(plain.root)["storage"]["detail"].startswith("sqlite")


def test_status_names_the_backend(daemon: DaemonProcess) -> None:
    daemon.start()
    try:
        r = run_cli("status", "--home", str(daemon.home))
        assert r.returncode == 0, r.stderr
        assert "store:        postgresql" in r.stdout and "schema agent_reverie" in r.stdout
    finally:
        assert daemon.stop() == 0
    data = json.loads(run_cli("status", "--json", "--home", str(daemon.home)).stdout)
    assert data["running"] is False and data["store"].startswith("postgresql")
    plain = DaemonProcess(home=daemon.home.parent / "plain", env=daemon_env())
    plain.start()
    try:
        r = run_cli("status", "--json", "--home", str(plain.home))
        assert json.loads(r.stdout)["store"].startswith("sqlite")
    finally:
        assert plain.stop() == 0


def test_maintenance_waits_for_the_daemon_holding_the_namespace_and_runs_once_it_dies(
    daemon: DaemonProcess,
    pg_url: str,  # noqa: F811
) -> None:
    daemon.start()
    home = str(daemon.home)
    try:
        with Client(daemon.socket_path) as c:
            c.hello()
            c.chat("remember that the boiler service is due in April")
        # Another daemon of this namespace is mid-maintenance: it holds the namespace's lock.
        other = psycopg.connect(pg_url, autocommit=True)
        other.execute("SELECT pg_advisory_lock(hashtext('reverie.agent_reverie.maintenance'))")
        out = run_cli("sleep", "--wait", "--home", home, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "another daemon is maintaining this namespace" in out.stdout
        # It is killed mid-cycle: its session ends, the server frees the lock.
        other.close()
        out = run_cli("sleep", "--wait", "--home", home, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "another daemon" not in out.stdout and "maintenance" in out.stdout
    finally:
        assert daemon.stop() == 0
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT p.report FROM agent_reverie.sleep_phases p "
            "JOIN agent_reverie.sleep_cycles c ON c.id = p.cycle_id "
            "WHERE p.phase = 'maintenance' ORDER BY c.started_at"
        ).fetchall()
    assert len(rows) == 2
    assert "another daemon" in rows[0][0] and "another daemon" not in rows[1][0]


def test_a_message_sent_while_the_server_is_away_is_kept_and_answered_when_it_returns(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    """While the server is away the trunk answers from what it has and queues its writes;
    once the server is back they land, each once."""
    d = DaemonProcess(home=pg_home(tmp_path / "home", dedicated_pg.url), env=daemon_env())
    d.start()
    home = str(d.home)
    outage = ["During the outage: the shed key is blue.", "Also the ladder is in the garage."]
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            _, frames = c.chat("Before the outage: the gate code is 4711.")
            assert frames[-1]["type"] == "done"
            dedicated_pg.stop()
            for text in outage:
                _, frames = c.chat(text)
                # Answered, the reply streamed, though the store cannot be read or written.
                assert frames[-1]["type"] == "done", frames[-1]
                assert any(f["type"] == "delta" for f in frames)
            r = run_cli("remember", "the bike lock code is 2580", "--home", home, "--json")
            assert r.returncode == 0, r.stdout + r.stderr + d.logs()[-6000:]
            fact = json.loads(r.stdout)["id"]
            # A change to a fact the index holds waits for the server (nothing half-applied).
            r = run_cli("remember", "--retract", fact, "--reason", "x", "--home", home)
            assert r.returncode != 0 and "nothing was changed" in r.stdout + r.stderr
            assert "retract" not in "".join(p.read_text() for p in d.home.rglob("facts.jsonl"))
            status = c.command("status")
            away = status.get("store_away") or status.get("data", {}).get("store_away")
            assert away and away["queued_writes"] > 0, status
            store = status.get("store") or status.get("data", {}).get("store")
            assert "AWAY since" in store, status
            # The transcript, the home's truth, holds both sides of every outage turn.
            said = "".join(p.read_text() for p in (d.home / "sessions" / "trunk").glob("*.jsonl"))
            assert all(text in said for text in outage)
            queue = d.home / "store-queue.jsonl"
            assert queue.exists()
            dedicated_pg.start()
        # Within a bounded wait the queued writes land and the catch-up indexes the rest.
        found = ""
        for _ in range(60):
            r = run_cli("memory", "search", "shed key blue", "--home", home, "--json")
            r2 = run_cli("memory", "search", "bike lock code", "--home", home, "--json")
            found = r.stdout + r2.stdout
            if "shed key is blue" in r.stdout and "2580" in r2.stdout:
                break
            time.sleep(1)
        assert "shed key is blue" in found and "2580" in found, found + d.logs()
        assert not queue.exists()
        assert d.stop() == 0
        with psycopg.connect(dedicated_pg.url) as conn:
            users = conn.execute(
                "SELECT content, count(*) FROM agent_reverie.messages WHERE role = 'user'"
                " GROUP BY content"
            ).fetchall()
            replies = conn.execute(
                "SELECT count(*) FROM agent_reverie.messages WHERE role = 'assistant'"
            ).fetchone()
            ledger = conn.execute(
                "SELECT count(DISTINCT turn_id), count(*) FROM agent_reverie.usage_ledger"
                " WHERE role = 'trunk'"
            ).fetchone()
            reports = conn.execute("SELECT count(*) FROM agent_reverie.turn_reports").fetchone()
            skipped = [
                json.loads(r[0]).get("skipped_layers")
                for r in conn.execute("SELECT report FROM agent_reverie.turn_reports").fetchall()
            ]
        # Every message indexed once, every turn's spend and report recorded once.
        counts = dict(users)
        assert all(counts.get(text) == 1 for text in outage), counts
        assert sum(counts.values()) == 3, counts
        assert replies is not None and replies[0] == 3
        assert ledger == (3, 3), ledger
        assert reports is not None and reports[0] == 3
        # The outage turns' reports say which memory layers they went without, and why.
        assert sum(1 for layers in skipped if layers) == 2, skipped
        assert all("away" in row["reason"] for layers in skipped for row in layers or ())
    finally:
        if d.proc is not None and d.proc.poll() is None:
            assert d.stop() == 0


def test_a_daemon_started_while_its_server_is_away_says_so_and_exits_to_be_started_again(
    tmp_path: Path,
) -> None:
    """No server: exit 75 (EX_TEMPFAIL, systemd starts it again) with one line naming the
    server — not a full disk's advice, not a traceback — and the home's inbox untouched."""
    home = pg_home(tmp_path / "away", "postgresql://nobody@127.0.0.1:1/nowhere")
    for _ in range(3):  # the traceback was a race at exit: asked a few times
        r = run_cli("run", "--home", str(home))
        assert r.returncode == 75, r.stderr
        assert "the memory store's server cannot be reached" in r.stderr
        assert "127.0.0.1" in r.stderr and "[storage] url" in r.stderr
        assert "free some space" not in r.stderr and "Traceback" not in r.stderr, r.stderr
