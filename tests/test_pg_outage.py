"""The PostgreSQL store while its server is away: the breaker, the queue of writes, the context.

Against real servers (tests/postgres_server.py): a shared one for the queue, a dedicated one
stopped and started for the outage itself.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import psycopg
import pytest

from daemon.clock import SystemClock
from daemon.context.assembler import ContextAssembler
from daemon.memory.system import MemorySystem
from daemon.models.base import Usage
from daemon.models.ledger import UsageLedger
from daemon.paths import Home
from daemon.settings import Settings
from daemon.store.db import Database
from daemon.store.outage import APPLIED_KEY, PROBE_MAX_S, Breaker, WriteQueue
from daemon.store.postgres import PgConnection, StorageUnavailable, StoreAway
from daemon.tokens import TokenCounter
from daemon.topics.router import TopicRouter
from tests.harness import Client, DaemonProcess, daemon_env
from tests.postgres_server import DedicatedServer, dedicated_pg, pg_server, pg_url  # noqa: F401

KV = "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT, updated_at TEXT)"


def wait_back(conn: PgConnection) -> None:
    """Call the store until the server answers again (the breaker's probe decides when)."""
    for _ in range(240):
        try:
            conn.execute("SELECT 1")
            return
        except StoreAway:
            time.sleep(0.25)
    raise AssertionError("the server never came back")


def test_the_breaker_backs_off_to_its_cap_and_waits_between_probes() -> None:
    breaker = Breaker()
    breaker.trip("refused")
    since = breaker.since
    assert breaker.away and not breaker.due()
    for _ in range(10):
        breaker.trip("refused again")
    assert breaker.since == since  # the outage began at the first failure
    assert breaker.delay == PROBE_MAX_S
    assert "away since" in str(breaker.refusal())
    breaker.close()
    assert not breaker.away


def test_once_the_server_is_away_calls_fail_fast_until_a_probe_finds_it_back(
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    conn = PgConnection.connect(dedicated_pg.url, "agent_breaker")
    backs: list[int] = []
    # What runs first on the server found back (the daemon applies its queue here).
    conn.on_back = lambda c: backs.append(c.execute("SELECT 41 + 1").fetchone()[0])  # type: ignore[index]
    try:
        dedicated_pg.stop()
        with pytest.raises(StoreAway):
            conn.execute("SELECT 1")
        assert conn.breaker.away and conn.breaker.probes == 0
        # Known away: the next calls are refused without trying the server at all.
        for _ in range(20):
            with pytest.raises(StoreAway):
                conn.execute("SELECT 1")
        assert conn.breaker.probes <= 1
        dedicated_pg.start()
        wait_back(conn)
        assert backs == [42]
        assert not conn.breaker.away
        assert conn.execute("SELECT 2").fetchone()[0] == 2  # type: ignore[index]
    finally:
        conn.close()


def test_queued_writes_apply_in_order_once_even_when_a_replay_is_cut_short(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    conn = PgConnection.connect(pg_url, "agent_queue")
    try:
        conn.execute(KV)
        conn.execute("CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, v TEXT)")
        conn.execute("CREATE TABLE flag (x INT)")
        queue = WriteQueue(tmp_path / "store-queue.jsonl")
        for v in ("a", "b"):
            queue.append("INSERT INTO ledger(v) VALUES (?)", (v,))
        # The server session ends half-way through the replay (as when the server goes again),
        # the first time only.
        queue.append(
            "SELECT CASE WHEN (SELECT count(*) FROM flag) = 0 "
            "THEN pg_terminate_backend(pg_backend_pid()) ELSE true END",
            (),
        )
        for v in ("c", "d"):
            queue.append("INSERT INTO ledger(v) VALUES (?)", (v,), session="trunk-x")
        assert queue.pending() == 5
        # Lost mid-transaction: that entry's transaction is gone and the caller told.
        with pytest.raises(StorageUnavailable):
            queue.replay(conn)
        assert [r[0] for r in conn.execute("SELECT v FROM ledger ORDER BY id").fetchall()] == [
            "a",
            "b",
        ]
        assert queue.path.exists()
        conn.execute("INSERT INTO flag VALUES (1)")
        queue.replay(conn)
        rows = conn.execute("SELECT v FROM ledger ORDER BY id").fetchall()
        assert [r[0] for r in rows] == ["a", "b", "c", "d"]  # in order, none twice
        assert not queue.path.exists()
        mark = conn.execute("SELECT value FROM kv WHERE key = ?", (APPLIED_KEY,)).fetchone()
        assert mark is not None and json.loads(mark[0])["upto"] == 5
        applied, sessions = queue.take_applied()
        assert applied == 5 and sessions == {"trunk-x"}
        queue.replay(conn)  # nothing left: nothing applied again
        assert conn.execute("SELECT count(*) FROM ledger").fetchone()[0] == 4  # type: ignore[index]
    finally:
        conn.close()


def test_a_refused_queued_write_is_passed_over_without_blocking_the_rest(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    conn = PgConnection.connect(pg_url, "agent_poison")
    try:
        conn.execute(KV)
        conn.execute("CREATE TABLE ledger (id BIGSERIAL PRIMARY KEY, v TEXT)")
        queue = WriteQueue(tmp_path / "store-queue.jsonl")
        queue.append("INSERT INTO ledger(v) VALUES (?)", ("a",))
        queue.append("INSERT INTO no_such_table(v) VALUES (?)", ("lost",))
        # Queued by an older build, in SQLite's own syntax: refused unsent, passed over too.
        queue.append("INSERT OR REPLACE INTO ledger(id, v) VALUES (?, ?)", (9, "older"))
        queue.append("INSERT INTO ledger(v) VALUES (?)", ("b",))
        queue.replay(conn)
        rows = conn.execute("SELECT v FROM ledger ORDER BY id").fetchall()
        assert [r[0] for r in rows] == ["a", "b"]
        assert not queue.path.exists()
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_turn_while_the_server_is_away_skips_the_memory_layers_and_says_so(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    settings = Settings.model_validate({"storage": {"url": dedicated_pg.url}})
    async with MemorySystem.open_view(home, settings) as view:
        assembler = ContextAssembler(
            home=home,
            settings=settings,
            view=view,
            router=TopicRouter(home, settings.topics),
            counter=TokenCounter(),
            clock=SystemClock(),
        )
        before = await assembler.assemble("what is the gate code?")
        assert before.report["skipped_layers"] == []
        assert "memory-unavailable" not in before.text
        dedicated_pg.stop()
        try:
            with anyio.fail_after(120):
                during = await assembler.assemble("what is the gate code?")
        finally:
            dedicated_pg.start()
    skipped = {row["layer"] for row in during.report["skipped_layers"]}
    assert {"profile", "themes", "recollections", "recall"} <= skipped
    assert all("away" in row["reason"] for row in during.report["skipped_layers"])
    assert during.report["memory"] == "store away"
    # The model is told, inside a delimited notice, that it cannot search its memory now.
    assert '<notice kind="memory-unavailable">' in during.text
    assert "do not say you searched" in during.text


@pytest.mark.anyio
async def test_a_write_while_the_server_is_away_is_queued_and_lands_when_it_returns(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    settings = Settings.model_validate({"storage": {"url": dedicated_pg.url}})
    async with await Database.open_configured(home.db_file, settings) as db:
        caught: list[set[str]] = []

        async def after(sessions: set[str]) -> None:
            caught.append(sessions)

        db.after_outage(after)
        put = "INSERT INTO kv(key, value, updated_at) VALUES (?,?,?)"
        upsert = put + " ON CONFLICT(key) DO UPDATE SET value=excluded.value"
        assert await db.write(put, ("k1", '"one"', "t"))
        dedicated_pg.stop()
        try:
            # The first write meets the lost connection (safe to repeat: queued); the next is
            # refused by the open breaker without being tried (queued whatever it is).
            assert not await db.write(upsert, ("k2", '"two"', "t"), session="trunk-1")
            assert not await db.write(put, ("k3", '"three"', "t"))
            away = db.outage()
            assert away is not None and away["queued_writes"] == 2 and away["since"]
            assert db.away_since is not None
        finally:
            dedicated_pg.start()
        for _ in range(240):
            if await db.catch_up():
                break
            await anyio.sleep(0.25)
        assert db.outage() is None and caught == [{"trunk-1"}]
        rows = await db.fetchall("SELECT key FROM kv WHERE key LIKE 'k%' ORDER BY key")
        assert [r[0] for r in rows] == ["k1", "k2", "k3"]


@pytest.mark.anyio
async def test_spend_while_the_server_is_away_counts_against_the_cap_and_is_not_lost(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    settings = Settings.model_validate(
        {
            "storage": {"url": dedicated_pg.url},
            "spend": {"daily_cap_usd": 1.0, "prices": {"m": {"input": 1.0, "output": 0.0}}},
        }
    )
    call = Usage(input_tokens=600_000, output_tokens=0)  # $0.60 a call
    async with await Database.open_configured(home.db_file, settings) as db:
        ledger = UsageLedger(db, settings.spend, SystemClock())
        await ledger.record(role="trunk", provider="p", model="m", usage=call, turn_id="t1")
        assert (await ledger.allows(essential=True))[0]
        dedicated_pg.stop()
        try:
            await ledger.record(role="trunk", provider="p", model="m", usage=call, turn_id="t2")
            # The ledger cannot be read, and the cap still holds: $1.20 of $1.00.
            allowed, why = await ledger.allows(essential=True)
            assert not allowed and "1.20" in why
        finally:
            dedicated_pg.start()
        for _ in range(240):
            if await db.catch_up():
                break
            await anyio.sleep(0.25)
        today = await ledger.today()
        assert today.calls == 2 and round(today.cost_usd, 2) == 1.2


def test_a_daemon_stopped_during_the_outage_applies_its_queue_when_it_next_starts(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    root = tmp_path / "home"
    Home(root).ensure()
    (root / "reverie.toml").write_text(f'[storage]\nurl = "{dedicated_pg.url}"\n')
    d = DaemonProcess(home=root, env=daemon_env())
    d.start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            assert c.chat("Before: the pond is ten metres long.")[1][-1]["type"] == "done"
            dedicated_pg.stop()
            _, frames = c.chat("During: the heron visits at dawn.")
            assert frames[-1]["type"] == "done", frames[-1]
        # Stopping while the server is away loses nothing: the queue stays in the home.
        assert d.stop() == 0, d.logs()
        assert (root / "store-queue.jsonl").exists()
        dedicated_pg.start()
        d.start()
        assert not (root / "store-queue.jsonl").exists()  # applied before the daemon served
        assert d.stop() == 0
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.wait(10)
    with psycopg.connect(dedicated_pg.url) as conn:
        said = conn.execute(
            "SELECT content, count(*) FROM agent_reverie.messages GROUP BY content"
        ).fetchall()
    counts = dict(said)
    assert counts.get("During: the heron visits at dawn.") == 1, counts
    assert counts.get("Before: the pond is ten metres long.") == 1, counts


@pytest.mark.anyio
async def test_the_daemons_watch_sleeps_while_the_server_answers_and_wakes_when_it_goes(
    tmp_path: Path,
    dedicated_pg: DedicatedServer,  # noqa: F811
) -> None:
    """`store_trouble` (what the trunk's store watch waits on) returns only once the breaker
    trips: no wake-ups while the server answers, one as soon as a store call finds it away."""
    home = Home(tmp_path / "home")
    home.ensure()
    settings = Settings.model_validate({"storage": {"url": dedicated_pg.url}})
    async with await Database.open_configured(home.db_file, settings) as db:
        woke: list[float] = []

        async def watch() -> None:
            await db.store_trouble()
            woke.append(time.monotonic())

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            for _ in range(6):
                await anyio.sleep(0.25)
                await db.fetchone("SELECT 1")
            assert woke == []  # the server answered throughout
            dedicated_pg.stop()
            try:
                with pytest.raises(StoreAway):
                    await db.fetchone("SELECT 1")
                tripped = time.monotonic()
                with anyio.fail_after(5):
                    while not woke:
                        await anyio.sleep(0.05)
                assert woke[0] - tripped < 1.0
                # Already away: asked again, it returns at once.
                with anyio.fail_after(1):
                    await db.store_trouble()
            finally:
                dedicated_pg.start()
