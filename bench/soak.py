"""Soak: thousands of turns with sleeps between, through the real daemon; the resource curve.

    python -m bench.soak                          # 4 cycles of 300 turns, a sleep after each
    python -m bench.soak --cycles 10 --turns 500  # the long run
    python -m bench.soak --work                   # every turn runs tools: a sandboxed `run`, a
                                                  # file read and an MCP call; the MCP server is
                                                  # killed every 50 turns and restarted

The daemon runs as a subprocess on the offline model (no key, no embedder unless
`--embedder minilm`); with `--work` the trunk talks to the fake Messages API of the tests, which
asks for three tools at once every turn (`run` in the bubblewrap sandbox, `read_file`, and the
test MCP server's `echo`), and the bench kills the MCP server every `--kill-every` turns. After start, every `--every` turns and after each sleep the bench reads the
daemon's RSS, open file descriptors and child processes from /proc, and the database and WAL
sizes from the home, and asks `status` for the daemon's own view of them (the same figures, with
its drift warnings). It prints the curve and writes `bench/results/soak.json`.

What it checks is what a person running it for years needs: after a night's sleep RSS is back
within 20 MB of where it was after start, fds and children do not grow, the WAL stays bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env  # noqa: E402

WORK_CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
trunk = ["run", "read_file", "recall", "mcp__notes__*"]

[permissions]
rules = [{{ tool = "run", match = "echo soak *", decision = "allow" }}]

[mcp]
restart_base_s = 0.2

[[mcp.servers]]
name = "notes"
command = {python}
args = [{fake}]
env = {{ MCP_FAKE_PIDFILE = {pidfile} }}
permission = "allow"
"""
)


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


def _kill_mcp(pidfile: Path) -> None:
    """SIGKILL the MCP server's newest process (the daemon restarts it with backoff)."""
    pids = pidfile.read_text().split() if pidfile.exists() else []
    if pids:
        try:
            os.kill(int(pids[-1]), 9)
        except ProcessLookupError:
            pass


def run(
    cycles: int, turns: int, every: int, embedder: str, *, work: bool, kill_every: int
) -> dict[str, Any]:
    curve: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        home = Path(tmp) / "home"
        extra = {"REVERIE_LOG_LEVEL": "warning", "REVERIE_EMBEDDER": embedder}
        fake: Any = None
        pidfile = Path(tmp) / "mcp.pids"
        if work:
            from tests.fakes.anthropic_server import FakeAnthropic

            fake = stack.enter_context(FakeAnthropic())
            home.mkdir()
            (home / "workspace").mkdir()
            (home / "workspace" / "notes.md").write_text("soak notes\n" * 50)
            (home / "reverie.toml").write_text(
                WORK_CONFIG.format(
                    python=json.dumps(sys.executable),
                    fake=json.dumps(str(REPO / "tests" / "fakes" / "mcp_server.py")),
                    pidfile=json.dumps(str(pidfile)),
                )
            )
            extra.update(
                {"ANTHROPIC_API_KEY": "sk-ant-soak", "REVERIE_ANTHROPIC_BASE_URL": fake.url}
            )
        daemon = DaemonProcess(home, daemon_env(extra)).start(timeout=60)
        try:
            time.sleep(1.0)
            curve.append(sample(daemon, "start", 0))
            done = 0
            t0 = time.perf_counter()
            with Client(daemon.socket_path, timeout=120) as c:
                c.hello()
                for cycle in range(cycles):
                    for n in range(turns):
                        if fake is not None and fake.pending == 0:
                            # Only when the last plans were used up: a turn of the daemon's own
                            # (the wind-down's) may take one, and the next turn's would shift.
                            _plan_work_turn(fake, done)
                            if kill_every and done and done % kill_every == 0:
                                _kill_mcp(pidfile)
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
            if fake is not None:
                # The turns' tools really ran: count the steps that carried a `run` result.
                ran = sum(
                    "exit code: 0" in json.dumps(r.body["messages"][-1])
                    for r in fake.message_requests
                )
                assert ran >= 0.9 * done, f"only {ran} of {done} turns ran their tools"
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


def _plan_work_turn(fake: Any, n: int) -> None:
    from tests.fakes.anthropic_server import Planned

    fake.enqueue(
        Planned(
            text="",
            tool_calls=(
                ("run", {"command": f"echo soak {n}"}),
                ("read_file", {"path": "notes.md"}),
                ("mcp__notes__echo", {"text": f"soak {n}"}),
            ),
        ),
        Planned(text=f"Done with step {n}."),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--turns", type=int, default=300, help="turns between two sleeps")
    ap.add_argument("--every", type=int, default=100, help="sample every N turns")
    ap.add_argument("--embedder", default="none", help="none (default) or minilm")
    ap.add_argument("--work", action="store_true", help="tools every turn (fake Messages API)")
    ap.add_argument("--kill-every", type=int, default=50, help="with --work: kill MCP every N")
    args = ap.parse_args()
    out = run(
        args.cycles,
        args.turns,
        args.every,
        args.embedder,
        work=args.work,
        kill_every=args.kill_every,
    )
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
