"""The Matrix channel over a real Synapse: message → first reply, and the idle cost.

    nice -n 10 .venv/bin/python -m bench.matrix_bench                 # 30 messages, 120 s idle
    nice -n 10 .venv/bin/python -m bench.matrix_bench --messages 100 --idle 300

A Synapse homeserver on loopback (`tests/matrix_server.py`, the dev extra's matrix-synapse),
the real daemon with `[channels.matrix]` on and the offline model (no key: no network call for
the model), and a second real client as the person. Latency: the person sends a message and
waits for the bot's reply in the room (a long-poll `/sync` as the person, as Element would),
one message at a time; measured from the send request to the sync that carries the reply;
p50/p95/max over `--messages`. Idle: nobody talks for `--idle` seconds; measured over the window
are the daemon's CPU seconds (utime + stime of its process, all threads: the sync loop's
long-poll, the scheduler, everything), the model calls (rows added to the usage ledger, which
records every call, offline ones included — the latency phase shows it counting) and the
channel's syncs (its `last_sync` moving, from `status --json`). Prints a table, writes JSON to
`bench/results/matrix_bench.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.process import cpu_seconds, model_calls  # noqa: E402
from tests.harness import DaemonProcess, daemon_env, run_cli, wait_until  # noqa: E402
from tests.matrix_server import Account, Synapse, channel_toml  # noqa: E402

RESULTS = REPO / "bench" / "results"


def _status(daemon: DaemonProcess) -> dict[str, Any]:
    out = run_cli("status", "--json", "--home", str(daemon.home), env=daemon.env, timeout=60)
    return dict(json.loads(out.stdout)["matrix"])


def _sync(server: Synapse, who: Account, since: str | None, timeout_ms: int) -> dict[str, Any]:
    query = f"timeout={timeout_ms}" + (f"&since={since}" if since else "")
    return dict(server.request("GET", f"/_matrix/client/v3/sync?{query}", token=who.access_token))


def _replies(batch: dict[str, Any], room: str, bot: str) -> int:
    events = batch.get("rooms", {}).get("join", {}).get(room, {}).get("timeline", {})
    return sum(
        1
        for e in events.get("events", [])
        if e.get("sender") == bot and e.get("type") == "m.room.message"
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(messages: int, idle_s: float) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="rvmxb-"))
    server = Synapse(root / "synapse")
    server.start()
    daemon: DaemonProcess | None = None
    try:
        tag = uuid.uuid4().hex[:8]
        bot, person = server.register(f"bot{tag}"), server.register(f"person{tag}")
        room = server.create_room(person, [bot.user_id])
        home = root / "home"
        home.mkdir()
        (home / "reverie.toml").write_text(channel_toml(server, bot, room, person))
        env = daemon_env({"REVERIE_MATRIX_TOKEN": bot.access_token})
        daemon = DaemonProcess(home=home, env=env)
        daemon.start(timeout=60)
        assert daemon.proc is not None
        wait_until(lambda: _status(daemon)["state"] == "connected", 60, "the channel")  # type: ignore[arg-type]
        wait_until(
            lambda: (
                bot.user_id
                in server.request(
                    "GET",
                    f"/_matrix/client/v3/rooms/{room}/joined_members",
                    token=person.access_token,
                ).get("joined", {})
            ),
            60,
            "the bot to join",
        )
        since = _sync(server, person, None, 0)["next_batch"]
        ledger_before = model_calls(home)
        latencies: list[float] = []
        for i in range(messages):
            began = time.perf_counter()
            server.send_text(person, room, f"bench message {i}: how are you today?")
            got = 0
            while not got:
                batch = _sync(server, person, since, 30_000)
                since = batch["next_batch"]
                got = _replies(batch, room, bot.user_id)
                if time.perf_counter() - began > 120:
                    raise RuntimeError(f"no reply to message {i} in 120 s")
            latencies.append(time.perf_counter() - began)
        calls_in_latency = model_calls(home) - ledger_before

        time.sleep(5)  # the last turn's after-work (journal, index) settles
        syncs_before = _status(daemon)["last_sync"]
        ledger_idle = model_calls(home)
        cpu0, t0 = cpu_seconds(daemon.proc.pid), time.monotonic()
        time.sleep(idle_s)
        cpu1, t1 = cpu_seconds(daemon.proc.pid), time.monotonic()
        status = _status(daemon)
        idle_calls = model_calls(home) - ledger_idle
        minutes = (t1 - t0) / 60
        result = {
            "messages": messages,
            "first_reply_p50_s": round(statistics.median(latencies), 3),
            "first_reply_p95_s": round(_pct(latencies, 0.95), 3),
            "first_reply_max_s": round(max(latencies), 3),
            "model_calls_in_latency_phase": calls_in_latency,
            "idle_s": round(t1 - t0, 1),
            "idle_model_calls": idle_calls,
            "idle_cpu_s": round(cpu1 - cpu0, 3),
            "idle_cpu_s_per_min": round((cpu1 - cpu0) / minutes, 3),
            "synced_during_idle": status["last_sync"] != syncs_before,
            "channel_state": status["state"],
            "replies_sent": status["replies_sent"],
        }
        return result
    finally:
        if daemon is not None:
            daemon.stop()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=30)
    ap.add_argument("--idle", type=float, default=120.0, help="idle window, seconds")
    args = ap.parse_args(argv)
    result = run(args.messages, args.idle)
    for key, value in result.items():
        print(f"{key:32} {value}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "matrix_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
