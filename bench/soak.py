"""Soak: thousands of turns with sleeps between, through the real daemon; the resource curve.

    python -m bench.soak                          # 4 cycles of 300 turns, a sleep after each
    python -m bench.soak --cycles 10 --turns 500  # the long run

The daemon runs as a subprocess on the offline model (no key, no embedder unless
`--embedder minilm`). After start, every `--every` turns and after each sleep the bench reads the
daemon's RSS, open file descriptors and child processes from /proc, and the database and WAL
sizes from the home, and asks `status` for the daemon's own view of them (the same figures, with
its drift warnings). It prints the curve and writes `bench/results/soak.json`.

What it checks is what a person running it for years needs: after a night's sleep RSS is back
within 20 MB of where it was after start, fds and children do not grow, the WAL stays bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness import Client, DaemonProcess, daemon_env  # noqa: E402


def _proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _children(pid: int) -> int:
    n = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            n += len(Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except OSError:
            continue
    return n


def _size_mb(path: Path) -> float:
    return path.stat().st_size / 1e6 if path.exists() else 0.0


def sample(daemon: DaemonProcess, label: str, turns: int) -> dict[str, Any]:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    with Client(daemon.socket_path, timeout=30) as c:
        c.hello()
        status = c.command("status").get("data", {})
    res = status.get("resources") or {}
    return {
        "label": label,
        "turns": turns,
        "rss_mb": round(_proc_rss_mb(pid), 1),
        "fds": _fds(pid),
        "children": _children(pid),
        "db_mb": round(_size_mb(daemon.home / "reverie.db"), 2),
        "wal_mb": round(_size_mb(daemon.home / "reverie.db-wal"), 2),
        "status_rss_mb": res.get("rss_mb"),
        "warnings": res.get("warnings", []),
    }


def run(cycles: int, turns: int, every: int, embedder: str) -> dict[str, Any]:
    curve: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        env = daemon_env({"REVERIE_LOG_LEVEL": "warning", "REVERIE_EMBEDDER": embedder})
        daemon = DaemonProcess(home, env).start(timeout=60)
        try:
            time.sleep(1.0)
            curve.append(sample(daemon, "start", 0))
            done = 0
            t0 = time.perf_counter()
            with Client(daemon.socket_path, timeout=120) as c:
                c.hello()
                for cycle in range(cycles):
                    for n in range(turns):
                        # Varied words, so the index, the topic router and recall see new text.
                        c.chat(
                            f"day {cycle} note {n}: the {('garden', 'boiler', 'kayak', 'novel')[n % 4]} "
                            f"needs {n % 7} more hours and my friend {('Ada', 'Bo', 'Cy')[n % 3]} helps"
                        )
                        done += 1
                        if done % every == 0:
                            curve.append(sample(daemon, f"cycle {cycle}", done))
                    reply = c.command("sleep", {"wait": True})
                    assert reply.get("type") == "result", reply
                    curve.append(sample(daemon, f"after sleep {cycle}", done))
            wall = time.perf_counter() - t0
        finally:
            daemon.stop()
    start = curve[0]
    after = [p for p in curve if p["label"].startswith("after sleep")]
    return {
        "cycles": cycles,
        "turns_per_cycle": turns,
        "embedder": embedder,
        "wall_s": round(wall, 1),
        "curve": curve,
        "rss_after_sleep_minus_start_mb": [round(p["rss_mb"] - start["rss_mb"], 1) for p in after],
        "peak_rss_mb": max(p["rss_mb"] for p in curve),
        "fds_start_end": (start["fds"], curve[-1]["fds"]),
        "children_end": curve[-1]["children"],
        "wal_max_mb": max(p["wal_mb"] for p in curve),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--turns", type=int, default=300, help="turns between two sleeps")
    ap.add_argument("--every", type=int, default=100, help="sample every N turns")
    ap.add_argument("--embedder", default="none", help="none (default) or minilm")
    args = ap.parse_args()
    out = run(args.cycles, args.turns, args.every, args.embedder)
    print(
        f"{'point':<16} {'turns':>6} {'RSS MB':>8} {'fds':>5} {'kids':>5} {'db MB':>7} {'WAL MB':>7}"
    )
    for p in out["curve"]:
        print(
            f"{p['label']:<16} {p['turns']:>6} {p['rss_mb']:>8.1f} {p['fds']:>5} {p['children']:>5}"
            f" {p['db_mb']:>7.2f} {p['wal_mb']:>7.2f}"
            + (f"  ! {p['warnings']}" if p["warnings"] else "")
        )
    print(
        f"after each sleep, RSS − start: {out['rss_after_sleep_minus_start_mb']} MB; "
        f"peak {out['peak_rss_mb']} MB; fds {out['fds_start_end']}; WAL max {out['wal_max_mb']} MB; "
        f"{out['wall_s']} s"
    )
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "soak.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
