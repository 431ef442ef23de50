"""Daemon benchmarks: start-up to READY, idle RSS, frame→first-delta overhead, idle cost.

    python -m bench.daemon_bench                 # 5 start-ups, 50 turns, 20 s idle
    python -m bench.daemon_bench --idle 600      # the 10-minute idle check

READY is measured the way systemd sees it: the daemon runs with NOTIFY_SOCKET pointing at
a datagram socket of ours, and the clock stops when `READY=1` arrives. The overhead is the
time from writing a `message` frame to reading the first `delta`, with the offline model
(instant). Idle cost: CPU seconds used and model calls made while nobody talks to it.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.process import cpu_seconds, model_calls  # noqa: E402
from tests.harness import Client, daemon_env  # noqa: E402


def _start(home: Path, notify: Path) -> tuple[subprocess.Popen[bytes], float]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if notify.exists():
        notify.unlink()
    sock.bind(str(notify))
    sock.settimeout(30)
    env = daemon_env({"NOTIFY_SOCKET": str(notify), "REVERIE_LOG_LEVEL": "warning"})
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "run", "--home", str(home)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            msg = sock.recv(4096).decode()
            if "READY=1" in msg.split("\n"):
                return proc, time.perf_counter() - t0
    finally:
        sock.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def run(starts: int, turns: int, idle_s: float) -> dict[str, Any]:
    ready: list[float] = []
    rss: list[int] = []
    overhead: list[float] = []
    total_turn: list[float] = []
    idle: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        notify = Path(tmp) / "notify.sock"
        for i in range(starts):
            proc, t = _start(home, notify)
            ready.append(t)
            time.sleep(1.0)
            rss.append(_rss_kb(proc.pid))
            sock_path = home / "run" / "reverie.sock"
            if i == starts - 1:
                with Client(sock_path, timeout=30) as c:
                    c.hello()
                    c.chat("warm up")
                    for n in range(turns):
                        t0 = time.perf_counter()
                        c.send({"type": "message", "text": f"benchmark message {n}"})
                        first = None
                        while True:
                            f = c.recv()
                            if f["type"] == "delta" and first is None:
                                first = time.perf_counter() - t0
                            if f["type"] in ("done", "error") and "turn_id" in f:
                                break
                        total_turn.append(time.perf_counter() - t0)
                        overhead.append(first if first is not None else float("nan"))
                calls_before = model_calls(home)
                cpu_before = cpu_seconds(proc.pid)
                time.sleep(idle_s)
                cpu_after = cpu_seconds(proc.pid)
                idle = {
                    "seconds": idle_s,
                    "cpu_seconds": round(cpu_after - cpu_before, 3),
                    "cpu_percent": round(100 * (cpu_after - cpu_before) / idle_s, 3),
                    "model_calls": model_calls(home) - calls_before,
                    "rss_mb_after": round(_rss_kb(proc.pid) / 1024, 1),
                }
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return {
        "ready_s": {
            "median": round(statistics.median(ready), 3),
            "p95": round(pct(ready, 0.95), 3),
            "runs": len(ready),
        },
        "idle_rss_mb": {
            "median": round(statistics.median(rss) / 1024, 1),
            "max": round(max(rss) / 1024, 1),
        },
        "frame_to_first_delta_ms": {
            "median": round(1000 * statistics.median(overhead), 2),
            "p95": round(1000 * pct(overhead, 0.95), 2),
            "turns": len(overhead),
        },
        "full_turn_ms": {
            "median": round(1000 * statistics.median(total_turn), 2),
            "p95": round(1000 * pct(total_turn, 0.95), 2),
        },
        "idle": idle,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument(
        "--idle",
        type=float,
        default=20.0,
        help="seconds to sit idle while measuring CPU and model calls",
    )
    args = ap.parse_args()
    result = run(args.starts, args.turns, args.idle)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "daemon.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
