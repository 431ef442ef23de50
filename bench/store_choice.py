"""The storage boundary's choice, measured: SQLAlchemy Core against typed repositories.

Issue 36 asks for every SQL statement under `daemon/store/`, either through SQLAlchemy Core
(dialects, async engines over aiosqlite and psycopg, one migration history) or as statements
written out per dialect inside typed repositories over the daemon's own `Database`. This
measures what that choice changes here, side by side in one run:

1. **cold `reverie status`** (a stopped daemon, so status reads the SQLite file itself): the
   CPU-seconds of the whole process and the modules it has loaded, as it is and with what a
   Core port would add to it before it could run a statement — SQLAlchemy, its async
   extension, the aiosqlite dialect, and `Table` objects for the daemon's real schema (read
   from a migrated database) — plus SQLAlchemy's own `-X importtime` share;
2. **daemon start-up to READY** (systemd's `READY=1`, as bench.daemon_bench measures it), as it
   is and with the same preload;
3. **per-statement overhead**: N inserts then N primary-key selects (one statement each,
   autocommitted, as the daemon runs them) into the real `usage_ledger` and `kv` tables of a
   migrated SQLite file, through raw `sqlite3`, the daemon's `Database`, a typed repository
   over it (rows as dataclasses), and SQLAlchemy Core's async engine (Core constructs, and
   `text()`), each on a fresh copy of the file.

SQLAlchemy is not a dependency; install it beside the checkout, never into pyproject:

    .venv/bin/python -m pip install --target /tmp/sa 'sqlalchemy[asyncio]>=2.0'
    SQLALCHEMY_PATH=/tmp/sa nice -n 10 .venv/bin/python -m bench.store_choice

Without it the SQLAlchemy columns are left out, saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness import daemon_env  # noqa: E402

SA_PATH = os.environ.get("SQLALCHEMY_PATH", "")

# What a Core port imports and builds before its first statement: the library, the async
# extension, the dialect, and one Table per real table (schema JSON in REVERIE_BENCH_SCHEMA).
PRELOAD = """
import json, os
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
import sqlalchemy.dialects.sqlite.aiosqlite
_md = sa.MetaData()
for _name, _cols in json.loads(os.environ["REVERIE_BENCH_SCHEMA"]).items():
    sa.Table(_name, _md, *[sa.Column(c, sa.Text) for c in _cols])
create_async_engine("sqlite+aiosqlite:///" + os.environ["REVERIE_BENCH_DB"])
"""

# The CLI's entry point, with the preload (or nothing) first and the module count at exit.
BOOT = """
import atexit, sys
atexit.register(lambda: print("MODULES", len(sys.modules), file=sys.stderr))
{preload}
from daemon.cli import main
sys.argv = ["reverie"] + sys.argv[1:]
sys.exit(main())
"""


def env_for(preload: bool, db: Path, schema: dict[str, list[str]]) -> dict[str, str]:
    env = daemon_env({"REVERIE_LOG_LEVEL": "warning"})
    if preload:
        env["PYTHONPATH"] = SA_PATH
        env["REVERIE_BENCH_SCHEMA"] = json.dumps(schema)
        env["REVERIE_BENCH_DB"] = str(db)
    return env


def boot(preload: bool) -> str:
    return BOOT.format(preload=PRELOAD if preload else "")


def schema_of(db: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(db)
    try:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                " AND sql NOT LIKE 'CREATE VIRTUAL%'"
            )
        ]
        return {n: [c[1] for c in conn.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        conn.close()


# ----- 1. cold status ---------------------------------------------------------------------------
def cold_status(
    home: Path, preload: bool, runs: int, schema: dict[str, list[str]]
) -> dict[str, Any]:
    env = env_for(preload, home / "reverie.db", schema)
    cpu: list[float] = []
    modules = 0
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(
            [sys.executable, "-c", boot(preload), "status", "--home", str(home)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise SystemExit(f"status failed: {r.stderr[-500:]}")
        cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        modules = int(r.stderr.rsplit("MODULES", 1)[1].split()[0])
    return {
        "cpu_s_median": round(statistics.median(cpu), 3),
        "cpu_s_min": round(min(cpu), 3),
        "modules": modules,
    }


def sqlalchemy_importtime(home: Path, schema: dict[str, list[str]]) -> dict[str, Any]:
    """SQLAlchemy's cumulative import time (µs, `-X importtime`) and its module count."""
    env = env_for(True, home / "reverie.db", schema)
    r = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            PRELOAD
            + "\nimport sys\nprint(sum(1 for m in sys.modules if m.startswith(('sqlalchemy', 'greenlet'))))",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    cumulative = 0
    for line in r.stderr.splitlines():
        # "import time: self [us] | cumulative | imported package"
        if line.startswith("import time:") and "|" in line:
            parts = [p.strip() for p in line[len("import time:") :].split("|")]
            if parts[2] in (
                "sqlalchemy",
                "sqlalchemy.ext.asyncio",
                "sqlalchemy.dialects.sqlite.aiosqlite",
            ):
                cumulative += int(parts[1])
    return {"import_ms": round(cumulative / 1000, 1), "modules": int(r.stdout.split()[-1])}


# ----- 2. start-up to READY ---------------------------------------------------------------------
def ready_time(home: Path, preload: bool, schema: dict[str, list[str]], notify: Path) -> float:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if notify.exists():
        notify.unlink()
    sock.bind(str(notify))
    sock.settimeout(1.0)
    env = env_for(preload, home / "reverie.db", schema)
    env["NOTIFY_SOCKET"] = str(notify)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", boot(preload), "run", "--home", str(home)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while True:
            try:
                if "READY=1" in sock.recv(4096).decode().split("\n"):
                    return time.perf_counter() - t0
            except TimeoutError:
                if proc.poll() is not None:
                    err = proc.stderr.read().decode()[-800:] if proc.stderr else ""
                    raise SystemExit(f"the daemon exited before READY: {err}") from None
                if time.perf_counter() - t0 > 120:
                    raise SystemExit("no READY within 120 s") from None
    finally:
        sock.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


# ----- 3. per statement -------------------------------------------------------------------------
INSERT = (
    "INSERT INTO usage_ledger(ts, day, role, provider, model, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens, cost_usd, session_id, turn_id)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)
SELECT = "SELECT id, ts, day, role, model, input_tokens, cost_usd FROM usage_ledger WHERE id = ?"
KV_UPSERT = (
    "INSERT INTO kv(key, value, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
)
NOW = "2026-11-28T10:00:00+00:00"
KV_GET = "SELECT value FROM kv WHERE key = ?"


def params(i: int) -> tuple[Any, ...]:
    return (
        "2026-11-28T10:00:00+00:00",
        "2026-11-28",
        "trunk",
        "anthropic",
        "m",
        i,
        i,
        0,
        0,
        0.001,
        "s",
        f"t{i}",
    )


@dataclass(frozen=True, slots=True)
class LedgerRow:
    id: int
    ts: str
    day: str
    role: str
    model: str
    input_tokens: int
    cost_usd: float


def raw_sqlite(db: Path, n: int) -> dict[str, float]:
    from daemon.store.db import connect_sync

    conn = connect_sync(db)
    t0 = stamp()
    for i in range(n):
        conn.execute(INSERT, params(i))
    t1 = stamp()
    for i in range(1, n + 1):
        conn.execute(SELECT, (i,)).fetchone()
    t2 = stamp()
    for i in range(n):
        conn.execute(KV_UPSERT, (f"k{i % 100}", str(i), NOW))
        conn.execute(KV_GET, (f"k{i % 100}",)).fetchone()
    t3 = stamp()
    conn.close()
    return per_statement(n, t0, t1, t2, t3)


def stamp() -> tuple[float, float]:
    """(wall, CPU of the whole process, every thread): aiosqlite's thread hop shows in both."""
    return time.perf_counter(), time.process_time()


Stamp = tuple[float, float]


def per_statement(n: int, t0: Stamp, t1: Stamp, t2: Stamp, t3: Stamp) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, clock in ((0, "wall"), (1, "cpu")):
        out[f"insert_{clock}_us"] = round(1e6 * (t1[i] - t0[i]) / n, 1)
        out[f"select_{clock}_us"] = round(1e6 * (t2[i] - t1[i]) / n, 1)
        out[f"kv_upsert_get_{clock}_us"] = round(1e6 * (t3[i] - t2[i]) / (2 * n), 1)
    return out


async def through_database(db_path: Path, n: int, typed: bool) -> dict[str, float]:
    from daemon.store.db import Database

    async with await Database.open(db_path, migrate=False) as db:
        t0 = stamp()
        for i in range(n):
            await db.execute(INSERT, params(i))
        t1 = stamp()
        for i in range(1, n + 1):
            row = await db.fetchone(SELECT, (i,))
            if typed:
                LedgerRow(**dict(zip(LedgerRow.__slots__, row, strict=True)))  # type: ignore[arg-type]
        t2 = stamp()
        for i in range(n):
            await db.execute(KV_UPSERT, (f"k{i % 100}", str(i), NOW))
            await db.fetchone(KV_GET, (f"k{i % 100}",))
        t3 = stamp()
    return per_statement(n, t0, t1, t2, t3)


async def through_sqlalchemy(db_path: Path, n: int, core: bool) -> dict[str, float]:
    import sqlalchemy as sa
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(f"sqlite+aiosqlite:///{db_path}")

    @sa.event.listens_for(engine.sync_engine, "connect")
    def configure(dbapi_conn: Any, _record: Any) -> None:
        # The daemon's own settings (daemon.store.db.connect_sync), so both sync alike.
        for pragma in ("busy_timeout=5000", "foreign_keys=ON", "synchronous=NORMAL"):
            dbapi_conn.execute(f"PRAGMA {pragma}")

    md = sa.MetaData()
    async with engine.connect() as conn:
        await conn.run_sync(lambda sync: md.reflect(sync, only=["usage_ledger", "kv"]))
    ledger, kv = md.tables["usage_ledger"], md.tables["kv"]
    names = (
        "ts",
        "day",
        "role",
        "provider",
        "model",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
        "session_id",
        "turn_id",
    )
    cols = [ledger.c[c] for c in ("id", "ts", "day", "role", "model", "input_tokens", "cost_usd")]
    if core:
        ins: Any = ledger.insert()
        sel: Any = sa.select(*cols).where(ledger.c.id == sa.bindparam("id"))
        up = sqlite_insert(kv).values(
            key=sa.bindparam("k"), value=sa.bindparam("v"), updated_at=sa.bindparam("u")
        )
        upsert: Any = up.on_conflict_do_update(
            index_elements=["key"],
            set_={"value": up.excluded.value, "updated_at": up.excluded.updated_at},
        )
        get: Any = sa.select(kv.c.value).where(kv.c.key == sa.bindparam("k"))
    else:
        ins = sa.text(
            "INSERT INTO usage_ledger("
            + ", ".join(names)
            + ") VALUES ("
            + ", ".join(":" + c for c in names)
            + ")"
        )
        sel = sa.text(SELECT.replace("?", ":id"))
        upsert = sa.text(KV_UPSERT.replace("(?, ?, ?)", "(:k, :v, :u)"))
        get = sa.text(KV_GET.replace("?", ":k"))
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        t0 = stamp()
        for i in range(n):
            await conn.execute(ins, dict(zip(names, params(i), strict=True)))
        t1 = stamp()
        for i in range(1, n + 1):
            (await conn.execute(sel, {"id": i})).first()
        t2 = stamp()
        for i in range(n):
            await conn.execute(upsert, {"k": f"k{i % 100}", "v": str(i), "u": NOW})
            (await conn.execute(get, {"k": f"k{i % 100}"})).first()
        t3 = stamp()
    await engine.dispose()
    return per_statement(n, t0, t1, t2, t3)


def statements(template: Path, root: Path, n: int, have_sa: bool, rounds: int) -> dict[str, Any]:
    """Each path `rounds` times, interleaved (load on the machine hits all alike); medians."""
    import anyio

    def fresh(name: str) -> Path:
        p = root / f"{name}.db"
        shutil.copy(template, p)
        return p

    paths: dict[str, Any] = {
        "sqlite3 (no async)": lambda: raw_sqlite(fresh("raw"), n),
        "Database (aiosqlite)": lambda: anyio.run(through_database, fresh("db"), n, False),
        "repository (Database + dataclass rows)": lambda: anyio.run(
            through_database, fresh("repo"), n, True
        ),
    }
    if have_sa:
        paths["SQLAlchemy Core (async, aiosqlite)"] = lambda: anyio.run(
            through_sqlalchemy, fresh("sa_core"), n, True
        )
        paths["SQLAlchemy text() (async, aiosqlite)"] = lambda: anyio.run(
            through_sqlalchemy, fresh("sa_text"), n, False
        )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, path in paths.items():
            runs[name].append(path())
    return {
        name: {key: statistics.median(r[key] for r in got) for key in got[0]}
        for name, got in runs.items()
    }


def migrated(path: Path) -> None:
    from daemon.store.db import connect_sync
    from daemon.store.migrations import apply_migrations

    conn = connect_sync(path)
    apply_migrations(conn)
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="cold status runs per variant")
    ap.add_argument("--starts", type=int, default=5, help="daemon start-ups per variant")
    ap.add_argument("--statements", type=int, default=10_000, help="inserts and selects per path")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each path, interleaved")
    args = ap.parse_args()
    have_sa = bool(SA_PATH) and (Path(SA_PATH) / "sqlalchemy").is_dir()
    if have_sa:
        sys.path.insert(0, SA_PATH)
    else:
        print(
            "SQLALCHEMY_PATH unset or without sqlalchemy: its columns are left out", file=sys.stderr
        )
    result: dict[str, Any] = {"statements": args.statements, "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = root / "home"
        notify = root / "notify.sock"
        # One start makes the home and its database; status then reads a stopped daemon's store.
        ready_time(home, False, {}, notify)
        schema = schema_of(home / "reverie.db")
        result["tables"] = len(schema)
        variants = [False, True] if have_sa else [False]
        label = {False: "as is", True: "with SQLAlchemy preloaded"}
        result["cold_status"] = {
            label[v]: cold_status(home, v, args.runs, schema) for v in variants
        }
        if have_sa:
            result["sqlalchemy_import"] = sqlalchemy_importtime(home, schema)
        ready: dict[bool, list[float]] = {v: [] for v in variants}
        for _ in range(args.starts):  # interleaved, so load on the machine hits both alike
            for v in variants:
                ready[v].append(ready_time(home, v, schema, notify))
        result["ready_s"] = {
            label[v]: {"median": round(statistics.median(t), 3), "min": round(min(t), 3)}
            for v, t in ready.items()
        }
        template = root / "template.db"
        migrated(template)
        result["per_statement"] = statements(template, root, args.statements, have_sa, args.rounds)
    out = REPO / "bench" / "results" / "store_choice.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
