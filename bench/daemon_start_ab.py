"""Daemon start-up of two trees side by side: time to READY, CPU, idle RSS, modules.

    python -m bench.daemon_start_ab --base /tmp/base-tree --rounds 7

Each round starts the daemon of the base tree, then of this tree (alternating, so a busy
machine weighs on both alike), on a fresh home each time (offline model, no embedder, no MCP
servers, web console as configured by default). Measured per start: wall time from exec to
`READY=1` on the NOTIFY_SOCKET, the CPU seconds (user + system) the process used by then,
RSS one second after READY, and in a separate `-X importtime` start the number of modules
imported by one second after READY (what the start-up tasks import just after it included).
Then, the daemon idle since, the first turn: a client connects, reads `hello`, sends "hello"
and times the first `delta` and the `done` (what a first turn after an idle start costs,
the tokenizer's vocabulary included when it is loaded then).
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.process import cpu_seconds  # noqa: E402
from tests.harness import Client, daemon_env  # noqa: E402


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_once(tree: Path, tmp: Path, importtime: bool = False) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(dir=tmp)) / "home"
    notify = home.parent / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(60)
    env = daemon_env(
        {"NOTIFY_SOCKET": str(notify), "REVERIE_LOG_LEVEL": "warning", "PYTHONPATH": str(tree)}
    )
    args = [sys.executable, *(["-X", "importtime"] if importtime else [])]
    err = (home.parent / "stderr").open("wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [*args, "-m", "daemon.cli", "run", "--home", str(home)],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        while "READY=1" not in sock.recv(4096).decode().split("\n"):
            pass
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(proc.pid)
        time.sleep(1.0)
        rss = _rss_kb(proc.pid) / 1024
        profile = (home.parent / "stderr").read_text(errors="replace").splitlines()
        first_delta, first_done = _first_turn(home / "run" / "reverie.sock")
    finally:
        sock.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        err.close()
    out: dict[str, float] = {
        "wall": wall,
        "cpu": cpu,
        "rss": rss,
        "first_delta": first_delta,
        "first_done": first_done,
    }
    if importtime:
        out["modules"] = len(
            {ln.rsplit("|", 1)[-1].strip() for ln in profile if ln.startswith("import time:")}
            - {"imported package"}
        )
    return out


def _first_turn(socket_path: Path) -> tuple[float, float]:
    """Seconds from sending "hello" to the first `delta`, and to `done`."""
    with Client(socket_path, timeout=60) as c:
        c.hello()
        t0 = time.perf_counter()
        c.send({"type": "message", "text": "hello"})
        delta = done = 0.0
        while not done:
            frame = c.recv()
            if frame.get("type") == "delta" and not delta:
                delta = time.perf_counter() - t0
            elif frame.get("type") == "done":
                done = time.perf_counter() - t0
            elif frame.get("type") == "error":
                raise RuntimeError(f"the first turn failed: {frame}")
    return delta, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="the other tree (a worktree)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    trees = {"base": args.base.resolve(), "head": REPO}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    mods: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print(f"homes under {tmp}", file=sys.stderr)
        for name, tree in trees.items():
            mods[name] = start_once(tree, tmp, importtime=True)["modules"]
        for _ in range(args.rounds):
            for name, tree in trees.items():
                runs[name].append(start_once(tree, tmp))
    print(
        "| tree | READY wall median (min–max) | CPU s to READY median | idle RSS MB median"
        " | modules | first turn: delta / done median |"
    )
    print("|---|---|---|---|---|---|")
    for name, rs in runs.items():
        wall = [r["wall"] for r in rs]
        print(
            f"| {name} | {statistics.median(wall):.3f} s ({min(wall):.3f}–{max(wall):.3f}) "
            f"| {statistics.median(r['cpu'] for r in rs):.3f} "
            f"| {statistics.median(r['rss'] for r in rs):.1f} | {int(mods[name])} "
            f"| {statistics.median(r['first_delta'] for r in rs):.3f} s"
            f" / {statistics.median(r['first_done'] for r in rs):.3f} s |"
        )


if __name__ == "__main__":
    main()
