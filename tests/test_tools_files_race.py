"""The file tools under attack from inside the workspace, and on a file too big to hold.

A process that may write the workspace (a cloned repository's hooks, an approved `run`, an MCP
server) can swap a directory for a symlink to somewhere else between a tool's check and its
use. `Swapper` does exactly that with renameat2(RENAME_EXCHANGE) in a tight loop, in its own
process, while the tools — in process, and through the real daemon with approved writes — read,
list, search and write under the swapped names: no byte from outside may come back and no file
may appear outside. And a ranged read of a one-line file of hundreds of megabytes must not
raise the daemon's peak memory by more than a block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.settings import Settings, WorkspaceSettings
from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env
from tests.test_tools_files import CTX, SEARCHES, Bench

pytestmark = pytest.mark.anyio

MARKER = "OUTSIDE-MARKER-7f3a"
OUTSIDE_NAMES = ["note.txt", "outside-only.txt"]

# Exchanges pairs of names (renameat2 with RENAME_EXCHANGE: atomic, both names always exist),
# one pair after the other in a tight loop until SIGTERM, then prints how many exchanges it
# made; with a count, exchanges each pair that many times and exits.
_SWAP = r"""
import ctypes, os, platform, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
count = int(sys.argv[1])
names = [os.fsencode(n) for n in sys.argv[2:]]
pairs = list(zip(names[::2], names[1::2]))
fn = getattr(libc, "renameat2", None)
if fn is not None:
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    swap = lambda a, b: fn(-100, a, -100, b, 2)
else:  # an older libc: the system call itself
    nr = {"x86_64": 316, "aarch64": 276}[platform.machine()]
    swap = lambda a, b: libc.syscall(nr, -100, a, -100, b, 2)
def checked(a, b):
    if swap(a, b) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
done = 0
def stop(*_):
    print(done, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
if count:
    for a, b in pairs:
        for _ in range(count):
            checked(a, b)
    sys.exit(0)
print("ready", flush=True)
while True:
    for a, b in pairs:
        checked(a, b)
        done += 1
"""


class Swapper:
    """Each `(real, link)` pair — something inside, a symlink out — exchanged in a loop by
    one other process (one, so the race costs one core)."""

    def __init__(self, *pairs: tuple[Path, Path]) -> None:
        self.pairs = pairs
        self.swaps = 0
        self.proc: subprocess.Popen[str] | None = None

    def _argv(self, count: int, pairs: tuple[tuple[Path, Path], ...]) -> list[str]:
        return [sys.executable, "-c", _SWAP, str(count), *(str(p) for pair in pairs for p in pair)]

    def __enter__(self) -> Swapper:
        self.proc = subprocess.Popen(
            self._argv(0, self.pairs),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready", self.proc.stderr
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.terminate()
        out, err = self.proc.communicate(timeout=10)
        assert self.proc.returncode == 0, err
        self.swaps = int(out.split()[-1])
        # Back as it was: the real thing under its own name (a write that won the race may
        # have replaced the link itself with a file, inside).
        back = tuple((real, link) for real, link in self.pairs if real.is_symlink())
        if back:
            subprocess.run(self._argv(1, back), check=True)


def _outside(tmp_path: Path) -> Path:
    out = (tmp_path / "outside" / "od").resolve()
    out.mkdir(parents=True)
    for name in OUTSIDE_NAMES:
        (out / name).write_text(f"{MARKER} {name}\n")
    return out


def _outside_unchanged(out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == OUTSIDE_NAMES
    for name in OUTSIDE_NAMES:
        assert (out / name).read_text() == f"{MARKER} {name}\n"


def _plant(root: Path, out: Path) -> tuple[Path, Path, Path, Path]:
    """sub/ (a real directory) beside swap -> out, leaf.txt beside leaflink -> out/note.txt."""
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "sub" / "note.txt").write_text("inside note\n")
    (root / "sub" / "deep" / "note.txt").write_text("inside deep note\n")
    (root / "swap").symlink_to(out)
    (root / "leaf.txt").write_text("inside leaf\n")
    (root / "leaflink").symlink_to(out / "note.txt")
    return root / "sub", root / "swap", root / "leaf.txt", root / "leaflink"


@SEARCHES
async def test_swapping_a_directory_for_an_outside_link_never_reaches_outside(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    b = Bench(tmp_path, Settings(workspace=WorkspaceSettings()), use_ripgrep=use_ripgrep)
    out = _outside(tmp_path)
    sub, swap, leaf, leaflink = _plant(b.root, out)
    calls: list[tuple[str, dict[str, Any]]] = (
        [("read_file", {"path": "sub/note.txt"})] * 12
        + [("read_file", {"path": "sub/deep/note.txt"})] * 4
        + [("read_file", {"path": "leaf.txt"})] * 8
        + [("list_files", {"path": "sub"})] * 3
        + [("search_files", {"pattern": "note|leaf|MARKER", "path": "sub"})] * 2
        + [("search_files", {"pattern": "note|leaf|MARKER"})]
    )
    results: list[tuple[str, bool, str]] = []

    async def one(name: str, args: dict[str, Any]) -> None:
        outcome = await b.registry.call(name, args, CTX)
        results.append((name, outcome.is_error, outcome.content))

    with Swapper((sub, swap), (leaf, leaflink)) as swapper:
        with anyio.fail_after(60):
            for round_ in range(12):
                async with anyio.create_task_group() as tg:
                    for name, args in calls:
                        tg.start_soon(one, name, args)
                # Writes run one at a time, as the registry runs them.
                for i in range(4):
                    await one("write_file", {"path": f"sub/w{round_}-{i}.txt", "content": "w\n"})
                    await one("write_file", {"path": "leaf.txt", "content": "inside leaf\n"})
                    await one(
                        "write_file", {"path": f"sub/deep/n{round_}-{i}.md", "content": "n\n"}
                    )
    assert swapper.swaps > 200
    leaked = [(n, text) for n, _, text in results if MARKER in text or "outside-only" in text]
    assert leaked == []
    _outside_unchanged(out)
    # The race did not just refuse everything: reads inside went through meanwhile.
    read_ok = [t for n, err, t in results if n == "read_file" and not err]
    assert any("inside note" in t for t in read_ok) and any("inside leaf" in t for t in read_ok)
    written = [n for n, err, _ in results if n == "write_file" and not err]
    assert written
    # Whatever was written landed inside: under sub's real directory or as leaf.txt.
    for path in (sub, sub / "deep"):
        for f in path.iterdir():
            assert f.is_dir() or f.read_text() in (
                "w\n",
                "n\n",
                "inside note\n",
                "inside deep note\n",
            )


async def test_reads_writes_and_errors_leave_no_descriptor_open(tmp_path: Path) -> None:
    b = Bench(tmp_path, Settings(workspace=WorkspaceSettings()))
    out = _outside(tmp_path)
    _plant(b.root, out)
    (b.root / "loop").symlink_to("loop")
    before = set(os.listdir("/proc/self/fd"))
    for path in ("sub/note.txt", "leaf.txt", "swap/note.txt", "leaflink", "loop", "nope", "sub"):
        await b.call("read_file", path=path)
        await b.call("list_files", path=path)
        await b.call("search_files", pattern="note", path=path)
    await b.call("write_file", path="sub/new/dir/x.txt", content="x\n")
    await b.call("write_file", path="swap/x.txt", content="x\n")
    await b.call("edit_file", path="leaf.txt", old_string="inside", new_string="in")
    assert set(os.listdir("/proc/self/fd")) == before
    _outside_unchanged(out)


# --- through the real daemon ---------------------------------------------------------------

DAEMON_CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
# The trunk works itself, so each scripted call is one of the trunk's.
trunk = ["*"]

[permissions]
approval_timeout_s = 30.0
# The bulk of the writes runs unasked, so many fit in a step; the rest waits for a yes.
rules = [{ tool = "write_file", match = "sub/bulk-*", decision = "allow" }]
"""
)
BIG_LINE_BYTES = 300 * 1024 * 1024


def _tool_results(req: RecordedRequest) -> list[str]:
    out = []
    for message in req.body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = "".join(b.get("text", "") for b in inner if isinstance(b, dict))
                out.append(str(inner))
    return out


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/<pid>/status")


class Daemon:
    """One real daemon over a home with the planted workspace, and the fake API it talks to."""

    def __init__(self, base: Path) -> None:
        self.home = base / "home"
        self.ws = self.home / "workspace"
        self.ws.mkdir(parents=True)
        (self.home / "reverie.toml").write_text(DAEMON_CONFIG)
        self.out = _outside(base)
        self.fake = FakeAnthropic()
        self.proc: DaemonProcess | None = None

    def start(self) -> Daemon:
        self.fake.__enter__()
        self.proc = DaemonProcess(
            home=self.home,
            env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": self.fake.url}),
        )
        self.proc.start()
        return self

    def stop(self) -> None:
        try:
            if self.proc is not None:
                self.proc.stop()
        finally:
            self.fake.__exit__(None, None, None)

    def logs(self) -> str:
        return self.proc.logs() if self.proc is not None else ""

    @property
    def pid(self) -> int:
        assert self.proc is not None and self.proc.proc is not None
        return self.proc.proc.pid

    def turn(self, text: str, *, approve: bool = False) -> list[dict[str, Any]]:
        """One message, every approval answered yes; the frames until the turn is done."""
        assert self.proc is not None
        frames: list[dict[str, Any]] = []
        with Client(self.proc.socket_path, timeout=120) as c:
            c.hello()
            c.send({"type": "message", "text": text})
            while True:
                frame = c.recv()
                frames.append(frame)
                if frame["type"] == "approval":
                    assert approve, frame
                    c.send({"type": "approve", "id": frame["id"], "decision": "yes"})
                if frame["type"] in ("done", "error") and frame.get("turn_id"):
                    return frames


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = Daemon(tmp_path_factory.mktemp("race")).start()
    try:
        yield d
    finally:
        d.stop()


def test_the_daemon_under_a_swap_loop_reads_and_writes_nothing_outside(daemon: Daemon) -> None:
    ws, out = daemon.ws, daemon.out
    sub, swap, leaf, leaflink = _plant(ws, out)
    reads = [("read_file", {"path": "sub/note.txt"})] * 30 + [
        ("read_file", {"path": "leaf.txt"})
    ] * 10
    looks = [("list_files", {"path": "sub"})] * 3 + [
        ("search_files", {"pattern": "note|MARKER", "path": "sub"})
    ] * 3
    writes = [("write_file", {"path": f"sub/w{i}.txt", "content": f"w{i}\n"}) for i in range(8)]
    writes += [("write_file", {"path": "leaf.txt", "content": "inside leaf\n"})] * 4
    writes += [
        ("write_file", {"path": f"sub/bulk-{i}.txt", "content": f"w{i}\n"}) for i in range(80)
    ]
    steps = 2
    for _ in range(steps):
        daemon.fake.enqueue(
            Planned(tool_calls=tuple(reads + looks)), Planned(tool_calls=tuple(writes))
        )
    daemon.fake.enqueue(Planned.reply("Read and written."))
    with Swapper((sub, swap), (leaf, leaflink)) as swapper:
        frames = daemon.turn("Read my notes and write them down again.", approve=True)
    assert frames[-1]["type"] == "done", (frames[-1], daemon.logs()[-3000:])
    assert swapper.swaps > 200
    # The writes were the person's yes, not a rule (a write whose path led out at the time was
    # refused before anyone was asked).
    assert [f for f in frames if f["type"] == "approval"]
    results = [r for req in daemon.fake.message_requests for r in _tool_results(req)]
    assert len(results) >= steps * (len(reads) + len(looks) + len(writes))
    assert [r for r in results if MARKER in r or "outside-only" in r] == []
    _outside_unchanged(out)
    # Not everything was refused: reads and writes went through between the swaps (which of
    # the two swapped names a step's parallel reads meet depends on where the swapper is).
    assert any("inside note" in r or "inside leaf" in r for r in results)
    assert any("bytes to sub/" in r for r in results)
    for f in sub.iterdir():
        assert f.is_dir() or f.read_text() in {"inside note\n", *(f"w{i}\n" for i in range(80))}


def test_a_ranged_read_of_a_huge_one_line_file_keeps_the_daemon_small(daemon: Daemon) -> None:
    big = daemon.ws / "one-line.txt"
    block = b"abcdefghij" * (1024 * 1024 // 10) + b"abcd"  # 1 MiB, no newline
    with big.open("wb") as fh:
        for _ in range(BIG_LINE_BYTES // len(block)):
            fh.write(block)
    size = big.stat().st_size
    (daemon.ws / "small.txt").write_text("a small file\n")
    # A first turn of the same shape settles what any turn costs the daemon.
    daemon.fake.enqueue(
        Planned.tool("read_file", {"path": "small.txt", "start_line": 1, "end_line": 1}),
        Planned.reply("A small file."),
    )
    assert daemon.turn("What does small.txt say?")[-1]["type"] == "done"
    daemon.fake.enqueue(
        Planned.tool("read_file", {"path": "one-line.txt", "start_line": 1, "end_line": 1}),
        Planned.reply("A long line."),
    )
    seen = len(daemon.fake.message_requests)
    before = _peak_rss_kib(daemon.pid)
    frames = daemon.turn("What does one-line.txt start with?")
    after = _peak_rss_kib(daemon.pid)
    big.unlink()
    assert frames[-1]["type"] == "done", frames[-1]
    # The request after the call carries its result, last.
    result = _tool_results(daemon.fake.message_requests[-1])[-1]
    assert len(daemon.fake.message_requests) == seen + 2
    assert "     1\tabcdefghij" in result
    assert f"[line 1 is {size} bytes, over the" in result
    growth_mib = (after - before) / 1024
    assert growth_mib < 100, f"peak RSS grew by {growth_mib:.0f} MiB reading one line"
    print(json.dumps({"file_mib": size // 2**20, "peak_rss_growth_mib": round(growth_mib, 1)}))
