"""The `run` tool and its sandbox: real bubblewrap, real processes, real sockets.

Every security property is checked from inside a command: what it can see, write, reach and
read from its environment, and that nothing it starts outlives its call.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.paths import Home
from daemon.settings import RunSettings, Settings, ToolsSettings
from daemon.tools.cgroups import PidsCgroups
from daemon.tools.cgroups import members as cgroup_members
from daemon.tools.registry import ToolContext, ToolError, ToolOutcome, ToolRegistry
from daemon.tools.run import Capture, run_tools
from daemon.tools.sandbox import Sandbox, scrubbed_env
from daemon.tools.workspace import Workspace
from tests.harness import FAKE_API_CONFIG

pytestmark = pytest.mark.anyio

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed (apt-get install bubblewrap): the sandbox tests need it",
)
CTX = ToolContext(session_id="session-run", turn_id="turn-run")


@pytest.fixture
def home() -> Iterator[Home]:
    # Outside /tmp on purpose: the sandbox's private /tmp would hide a home under it anyway,
    # and the test must see the home hidden by its own mount, not by that one.
    root = Path(tempfile.mkdtemp(prefix="reverie-run-", dir="/var/tmp"))
    try:
        h = Home(root / "home")
        h.ensure()
        yield h
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _registry(home: Home, **run: Any) -> ToolRegistry:
    settings = Settings(tools=ToolsSettings(run=RunSettings(**run)))
    reg = ToolRegistry()
    for tool in run_tools(Workspace.for_home(home, settings), settings, home=home.root):
        reg.register(tool)
    return reg


async def _run(reg: ToolRegistry, command: str, **args: Any) -> ToolOutcome:
    with anyio.fail_after(60):
        return await reg.call("run", {"command": command, **args}, CTX)


def _processes_with(marker: str) -> list[int]:
    """Live processes whose argv holds `marker` (zombies have no argv)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in argv:
            found.append(int(entry.name))
    return found


def _marker() -> str:
    # A sleep length no other process on the machine uses: it is in every sleeper's argv.
    return f"3000.{secrets.randbelow(10**9):09d}"


MODES = [
    pytest.param({}, id="bwrap", marks=needs_bwrap),
    pytest.param({"sandbox": "none", "allow_unsandboxed": True}, id="bare"),
]


# --- what a command returns ---


@needs_bwrap
async def test_exit_code_and_both_streams_come_back(home: Home) -> None:
    out = await _run(_registry(home), "echo to-stdout; echo to-stderr >&2; exit 3")
    assert not out.is_error
    first, rest = out.content.split("\n", 1)
    assert first.startswith("exit code: 3 · ")
    assert "to-stdout\nto-stderr" in rest


@needs_bwrap
async def test_cwd_is_inside_the_workspace_or_refused(home: Home) -> None:
    reg = _registry(home)
    (home.workspace_dir / "sub").mkdir()
    out = await _run(reg, "pwd", cwd="sub")
    assert out.content.split("\n")[1] == str(home.workspace_dir / "sub")
    refused = await _run(reg, "pwd", cwd="/etc")
    assert refused.is_error and "outside the workspace" in refused.content
    too_long = await reg.call("run", {"command": "true", "timeout_s": 10_000}, CTX)
    assert too_long.is_error and "timeout_s must be <= 900" in too_long.content


@pytest.mark.parametrize("mode", MODES)
async def test_output_is_cut_to_its_head_and_tail(home: Home, mode: dict[str, Any]) -> None:
    reg = _registry(home, output_max_chars=1000, **mode)
    out = await _run(reg, "seq 1 200000")
    body = out.content.split("\n", 1)[1]
    assert body.startswith("1\n2\n3\n")
    assert body.endswith("199999\n200000\n")
    assert "output cut: 1,288,895 bytes in all" in body
    assert len(out.content) < 1000 + 200
    # Tens of megabytes go through the pipe; the tool keeps a bounded head and tail.
    big = await _run(reg, "head -c 40000000 /dev/zero | tr '\\0' x; echo; echo the-end")
    assert big.content.startswith("exit code: 0") and big.content.endswith("the-end\n")
    assert len(big.content) < 1200


def test_capture_memory_stays_bounded_however_much_arrives() -> None:
    capture = Capture(keep=4096)
    chunk = bytes(range(256)) * 256
    for _ in range(2000):  # 128 MB
        capture.add(chunk)
    assert capture.total == 2000 * len(chunk)
    assert len(capture.head) == 4096 and len(capture.tail) == 4096


def test_output_under_the_byte_cap_is_still_cut_to_its_characters() -> None:
    capture = Capture(keep=10_000)
    capture.add("".join(f"line {i}\n" for i in range(1000)).encode())
    text = capture.text(200)
    assert text.startswith("line 0\nline 1\n") and text.endswith("line 999\n")
    assert "output cut: 8,890 bytes in all" in text and len(text) < 300


# --- limits and lifetime ---


@pytest.mark.parametrize("mode", MODES)
async def test_what_a_finished_command_left_running_is_stopped(
    home: Home, mode: dict[str, Any]
) -> None:
    reg = _registry(home, **mode)
    m = _marker()
    # Many of them: bubblewrap exits with the command while its namespace is still dying.
    out = await _run(reg, f"for i in $(seq 40); do sleep {m} >/dev/null 2>&1 & done; echo left-it")
    assert out.content.startswith("exit code: 0") and "left-it" in out.content
    assert _processes_with(m) == []


@needs_bwrap
async def test_timeout_stops_the_whole_tree_even_a_detached_child(home: Home) -> None:
    reg = _registry(home)
    m = _marker()
    # A background child, a child in a subshell that exits (orphaning it), and one that left
    # the session with setsid: all three must be gone when the call returns.
    command = f"sleep {m} & ( setsid sleep {m} & ) ; sh -c 'sleep {m}; true' & sleep {m}"
    seen: list[int] = []
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            while len(seen) < 4:
                seen[:] = _processes_with(m)
                await anyio.sleep(0.05)

        tg.start_soon(watch)
        out = await _run(reg, command, timeout_s=2)
        tg.cancel_scope.cancel()
    assert len(seen) >= 4, "the command's processes never started"
    assert out.is_error and "timed out after 2 s" in out.content
    assert _processes_with(m) == []


async def test_bare_timeout_stops_the_group_and_its_descendants(home: Home) -> None:
    reg = _registry(home, sandbox="none", allow_unsandboxed=True)
    m = _marker()
    # `setsid` leaves the process group; its parent still waits, so it is a descendant.
    command = f"sleep {m} & sh -c 'setsid sleep {m} & wait' & sleep {m}"
    out = await _run(reg, command, timeout_s=1.5)
    assert out.is_error and "timed out" in out.content
    assert _processes_with(m) == []


@pytest.mark.skipif(
    os.geteuid() != 0 or PidsCgroups.find() is None, reason="needs root and a pids cgroup"
)
async def test_bare_as_root_the_cgroup_finds_a_double_forked_daemon(home: Home) -> None:
    reg = _registry(home, sandbox="none", allow_unsandboxed=True)
    m = _marker()
    # Out of the process group and orphaned at once: only its cgroup still knows it.
    out = await _run(reg, f"( setsid sleep {m} & ) ; echo left-it")
    assert out.content.startswith("exit code: 0") and "left-it" in out.content
    assert _processes_with(m) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_turn_kills_the_tree(home: Home, mode: dict[str, Any]) -> None:
    reg = _registry(home, **mode)
    m = _marker()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_run, reg, f"sleep {m} & sh -c 'sleep {m}; true' & sleep {m}")
            while len(_processes_with(m)) < 3:
                await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    # Cancellation returns only after the tree is stopped and reaped.
    assert _processes_with(m) == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_busy_loop_meets_the_cpu_limit(home: Home, mode: dict[str, Any]) -> None:
    reg = _registry(home, cpu_seconds=1, **mode)
    with anyio.fail_after(20):
        out = await _run(reg, "while :; do :; done", timeout_s=15)
    assert not out.is_error
    assert "killed by SIGXCPU: the CPU-time limit of 1 s" in out.content


def _wait_for(condition: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _sleepers(marker: str) -> list[int]:
    """Live `sleep MARKER` processes: the command's own. (bubblewrap's argv holds the whole
    command line, marker included, from the moment it starts, long before the sandbox is.)"""
    return [pid for pid in _processes_with(marker) if _cmdline(pid) == [b"sleep", marker.encode()]]


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def _start_time(pid: int) -> str | None:
    """When `pid` started (None once it is reaped): tells it from a later process of its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[19].decode()


@needs_bwrap
def test_if_the_daemon_dies_its_sandboxes_die_with_it(home: Home) -> None:
    m, orphan = _marker(), _marker()
    script = (
        "import anyio, sys; from pathlib import Path; "
        "from daemon.paths import Home; from daemon.settings import Settings; "
        "from daemon.tools.registry import ToolContext; from daemon.tools.run import run_tools; "
        "from daemon.tools.workspace import Workspace; "
        "h = Home(Path(sys.argv[1])); s = Settings(); "
        "run = run_tools(Workspace.for_home(h, s), s, home=h.root)[0]; "
        "anyio.run(run.handler, ToolContext(session_id='s', turn_id='t'), "
        "{'command': sys.argv[2], 'timeout_s': 120})"
    )
    # `( sleep O & )` leaves a child orphaned inside the sandbox: its pid 1 adopts it.
    command = f"sleep {m} & ( sleep {orphan} & ) ; sleep {m}"
    daemon = subprocess.Popen(
        [sys.executable, "-c", script, str(home.root), command],
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        _wait_for(
            lambda: len(_sleepers(m)) == 2 and len(_sleepers(orphan)) == 1,
            "the command never started",
        )
        # bubblewrap binds itself to the daemon's life (PR_SET_PDEATHSIG) before it lets the
        # sandbox be built, and the sandbox's pid 1 binds itself to bubblewrap's just before
        # it starts reaping. So once pid 1 has reaped the orphan, every process of the sandbox
        # dies with the daemon — waiting for that, not for time, is what makes this exact.
        (adopted,) = _sleepers(orphan)
        born = _start_time(adopted)
        os.kill(adopted, signal.SIGKILL)
        _wait_for(lambda: _start_time(adopted) != born, "the sandbox's pid 1 never reaped")
        daemon.kill()
        daemon.wait(30)
        # No cleanup code ran: the kernel ends the sandbox because its parent died.
        _wait_for(lambda: not _processes_with(m), "the sandbox outlived the daemon", 30.0)
    finally:
        # Whatever happened above, nothing of this test is left running.
        daemon.kill()
        daemon.wait(30)
        for pid in _processes_with(m) + _processes_with(orphan):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@needs_bwrap
async def test_memory_and_cpu_limits_hold_for_the_whole_tree(home: Home) -> None:
    reg = _registry(home, memory_mb=64, cpu_seconds=7)
    out = await _run(
        reg, "ulimit -v; ulimit -H -t; sh -c 'ulimit -t 100' 2>/dev/null || echo cannot-raise"
    )
    assert out.content.split("\n")[1:4] == ["65536", "8", "cannot-raise"]
    # 100 MB in one string cannot fit in a 64 MB address space.
    big = await _run(reg, "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${#x}")
    assert "100000000" not in big.content and "cannot allocate" in big.content


# A loop that tries to start 600 processes at once: each child sleeps, the loop counts.
FORKS_600 = """python3 -I -c '
import os, time
started, why = 0, "never refused"
for _ in range(600):
    try:
        pid = os.fork()
    except OSError as exc:
        why = exc.strerror
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    started += 1
print("started", started, "-", why)
'"""


def _started(output: str) -> tuple[int, str]:
    line = next(li for li in output.splitlines() if li.startswith("started "))
    count, why = line.removeprefix("started ").split(" - ", 1)
    return int(count), why


@needs_bwrap
async def test_a_command_cannot_start_more_processes_than_the_limit(home: Home) -> None:
    # As the test runs, root here: the kernel ignores RLIMIT_NPROC for root, so this is the
    # pids cgroup's doing (the test below covers a daemon run as its own user).
    started, why = _started((await _run(_registry(home, max_processes=100), FORKS_600)).content)
    # bubblewrap and the shell count too: a few short of the limit, far short of 600.
    assert 90 <= started < 100 and why == "Resource temporarily unavailable"
    # The default holds too: a few hundred at most.
    started, _ = _started((await _run(_registry(home), FORKS_600)).content)
    assert 240 <= started < 256


UNPRIVILEGED_RUN = """
import anyio, os, sys, time
from pathlib import Path
from daemon.paths import Home
from daemon.settings import RunSettings, Settings, ToolsSettings
from daemon.tools.registry import ToolContext
from daemon.tools.run import run_tools
from daemon.tools.workspace import Workspace

# 300 processes of this user outside any sandbox: the limit counts the sandbox's own.
outside = []
for _ in range(300):
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    outside.append(pid)
try:
    h = Home(Path(sys.argv[1]))
    s = Settings(tools=ToolsSettings(run=RunSettings(max_processes=int(sys.argv[2]))))
    run = run_tools(Workspace.for_home(h, s), s, home=h.root)[0]
    out = anyio.run(run.handler, ToolContext(session_id="s", turn_id="t"), {"command": sys.argv[3]})
    print("--- result ---", out, sep="\\n")
finally:
    for pid in outside:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
"""


@needs_bwrap
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to become an unprivileged user",
)
def test_the_process_limit_holds_for_a_daemon_run_as_its_own_user() -> None:
    # An unprivileged daemon: RLIMIT_NPROC inside the sandbox's own user namespace.
    root = Path(tempfile.mkdtemp(prefix="reverie-run-user-", dir="/var/tmp"))
    try:
        home = Home(root / "home")
        home.ensure()
        for path in [root, *root.rglob("*")]:
            os.chown(path, 65534, 65534)
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
                sys.executable,
                "-c",
                UNPRIVILEGED_RUN,
                str(home.root),
                "100",
                FORKS_600,
            ],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=Path(__file__).resolve().parent.parent,
            env={"PATH": os.environ["PATH"], "HOME": str(root), "PYTHONDONTWRITEBYTECODE": "1"},
        )
        assert done.returncode == 0, done.stderr
        result = done.stdout.split("--- result ---\n", 1)[1]
        assert result.startswith("exit code: 0"), done.stdout
        assert "at most 100 processes)" in done.stdout  # RLIMIT_NPROC, no cgroup
        started, why = _started(result)
        assert 90 <= started < 100 and why == "Resource temporarily unavailable"
    finally:
        shutil.rmtree(root)


def test_as_root_the_limit_needs_a_pids_cgroup_or_run_is_off() -> None:
    def sandbox(uid: int, cgroups: Any = None, **run: Any) -> Sandbox:
        return Sandbox.for_workspace(
            (),
            RunSettings(**run),
            home=Path("/nonexistent"),
            which=lambda _n: "/usr/bin/bwrap",
            uid=uid,
            find_cgroups=lambda: cgroups,
        )

    root = sandbox(0)
    assert root.mode == "off" and "set max_processes = 0" in root.reason
    assert "the daemon runs as root" in root.describe()
    # Said plainly, the person may run without a process limit.
    unlimited = sandbox(0, max_processes=0)
    assert unlimited.mode == "bwrap" and "no process limit" in unlimited.describe()
    assert "ulimit -u" not in " ".join(unlimited.argv("true", cwd=Path("/")))
    # Any other user: RLIMIT_NPROC, set inside the sandbox, no cgroup needed.
    user = sandbox(1000, max_processes=300)
    assert user.mode == "bwrap" and user.cgroups is None
    assert "ulimit -u 300 && exec" in " ".join(user.argv("true", cwd=Path("/")))
    assert user.describe() == "run: sandboxed by bubblewrap (network off, at most 300 processes)"


def _fake_proc(tmp_path: Path, cgroup: str, mounts: list[str]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text("".join(f"{i} 1 0:{i} {m}\n" for i, m in enumerate(mounts)))
    return proc


def test_where_a_pids_cgroup_can_be_made(tmp_path: Path) -> None:
    from daemon.tools.cgroups import _pids_base

    fs = tmp_path / "fs"
    # cgroup v1: a child of the daemon's own pids cgroup, under a mount of the hierarchy
    # (a container's mount may start at its own cgroup: the root field says where).
    v1 = _fake_proc(
        tmp_path / "a",
        "9:pids:/docker/c1/svc\n0::/\n",
        [
            f"/docker/c1 {fs}/pids rw - cgroup cgroup rw,pids",
            f"/ {fs}/cpu rw - cgroup cgroup rw,cpu",
        ],
    )
    assert _pids_base(v1) == fs / "pids" / "svc"
    # cgroup v2 with the daemon at the root of its namespace: the root, pids enabled below it.
    (fs / "v2").mkdir(parents=True)
    (fs / "v2" / "cgroup.controllers").write_text("cpu memory pids\n")
    (fs / "v2" / "cgroup.subtree_control").write_text("memory\n")
    v2 = _fake_proc(tmp_path / "b", "0::/\n", [f"/ {fs}/v2 rw - cgroup2 cgroup2 rw"])
    assert _pids_base(v2) == fs / "v2"
    assert (fs / "v2" / "cgroup.subtree_control").read_text() == "+pids\n"
    # cgroup v2 below the root (a systemd service): its own cgroup holds the daemon, so a
    # command could not join a child of it. None, and run says why for root.
    v2_service = _fake_proc(
        tmp_path / "c", "0::/system.slice/reverie.service\n", [f"/ {fs}/v2 rw - cgroup2 cgroup2 rw"]
    )
    assert _pids_base(v2_service) is None
    # No pids controller anywhere.
    (fs / "v2" / "cgroup.controllers").write_text("cpu memory\n")
    assert _pids_base(v2) is None


@needs_bwrap
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare to hide the cgroup file system",
)
def test_as_root_with_no_cgroup_to_be_had_run_is_off_and_doctor_says_why(
    home: Home,
) -> None:
    # A root daemon on a machine whose cgroups it cannot write: an empty, read-only
    # /sys/fs/cgroup in a mount namespace of its own.
    code = (
        "import json, sys; from daemon.cli import main; "
        "sys.exit(main(['doctor', '--home', sys.argv[1], '--json']))"
    )
    script = (
        "mount -t tmpfs -o ro tmpfs /sys/fs/cgroup && "
        f'exec {sys.executable} -c "$0" "$1" 2>/dev/null'
    )

    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, code, str(home.root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )
    check = next(c for c in json.loads(done.stdout) if c["name"] == "run")
    assert check["status"] == "warn" and check["fix"] == ""
    assert check["detail"].startswith(
        "off (the daemon runs as root, where the kernel ignores the process limit, and no "
        "pids cgroup can be made here"
    )


@pytest.mark.skipif(PidsCgroups.find() is None, reason="no pids cgroup can be made here")
def test_a_dead_daemons_cgroup_is_emptied_and_removed(tmp_path: Path) -> None:
    cgroups = PidsCgroups.find()
    assert cgroups is not None
    gone = subprocess.Popen(["true"])
    gone.wait()
    # What a daemon that died left: its cgroup, with a process of a sandbox still in it.
    ns = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    stale = cgroups.base / f"reverie-run-{ns}-{gone.pid}-0"
    # One of a daemon in another pid namespace: its pid means nothing here, it is left alone.
    foreign = cgroups.base / f"reverie-run-1-{gone.pid}-0"
    foreign.mkdir()
    stale.mkdir()
    m = _marker()
    left = subprocess.Popen(
        ["/bin/sh", "-c", 'echo $$ > "$0" && exec sleep "$1"', str(stale / "cgroup.procs"), m]
    )
    try:
        _wait_for(lambda: left.pid in cgroup_members(stale), "never joined", 30.0)
        assert PidsCgroups.find() is not None
        assert left.wait(10) == -signal.SIGKILL
        assert not stale.exists() and foreign.exists()
    finally:
        left.kill()
        left.wait()
        for path in (stale, foreign):
            with contextlib.suppress(OSError):
                path.rmdir()


# --- what a command can see ---


async def test_no_key_or_token_reaches_the_command(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets_env = {
        "ANTHROPIC_API_KEY": "sk-ant-api03-abcdefghijklmnopqrstuvwx",
        "GITHUB_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "DB_PASSWORD": "hunter2-hunter2",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "SSH_AUTH_SOCK": "/run/user/0/ssh-agent.sock",
        # Innocent name, a key's shape: dropped too.
        "INNOCENT": "sk-ant-api03-zyxwvutsrqponmlkjihgfedcba",
        # Innocent names, a URL with a password in it: dropped too.
        "DATABASE_URL": "postgres://app:hunter2secret@db.internal/app",
        "UPSTREAMS": "https://mirror.example/a,https://:t0ken-only@cache.example:8443/b",
    }
    # URLs without a password are not credentials: kept.
    harmless = {
        "MIRROR_URL": "https://mirror.example:8443/pypi/simple?x=a:b@c",
        "GIT_REMOTE": "ssh://git@github.com/otters/thames.git",
    }
    for name, value in {**secrets_env, **harmless}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    listed = ["PATH", "LANG", *secrets_env, *harmless]
    modes = [{"sandbox": "none", "allow_unsandboxed": True}]
    if shutil.which("bwrap"):
        modes.append({})
    for mode in modes:
        out = await _run(_registry(home, env=listed, **mode), "env")
        assert "LANG=C.UTF-8" in out.content and "PATH=" in out.content
        for name, value in harmless.items():
            assert f"{name}={value}" in out.content
        for name, value in secrets_env.items():
            assert name not in out.content and value not in out.content
        assert "hunter2secret" not in out.content and "t0ken-only" not in out.content
    assert scrubbed_env(listed, dict(os.environ)).keys() == {"PATH", "LANG", *harmless}


@needs_bwrap
async def test_no_network_inside_unless_the_config_allows_it(home: Home) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        # bash's /dev/tcp: no program outside the system is needed to try.
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        off = await _run(_registry(home), probe)
        on = await _run(_registry(home, network=True), probe)
    assert "connected" not in off.content.split("\n", 1)[1] and "exit code: 1" in off.content
    assert on.content.startswith("exit code: 0") and "connected" in on.content


@needs_bwrap
async def test_the_filesystem_as_the_command_sees_it(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemon's home holds its memory, database and config; the user's home holds keys.
    (home.root / "reverie.toml").write_text("# the daemon's config\n")
    (home.root / "reverie.db").write_bytes(b"SQLite format 3\x00")
    user_home = home.root.parent / "user"
    (user_home / ".ssh").mkdir(parents=True)
    (user_home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    monkeypatch.setenv("HOME", str(user_home))
    host_tmp = Path(tempfile.mkdtemp(prefix="reverie-host-"))
    try:
        reg = _registry(home)
        ws = home.workspace_dir
        script = "; ".join(
            [
                "echo written > made.txt && echo ws-writable",
                "touch /usr/reverie-probe 2>/dev/null || echo usr-readonly",
                f"cat {home.root}/reverie.toml 2>/dev/null || echo config-hidden",
                f"cat {home.root}/reverie.db 2>/dev/null || echo db-hidden",
                f"ls -A {home.root}",
                f"cat {user_home}/.ssh/id_ed25519 2>/dev/null || echo keys-hidden",
                f"test -e {host_tmp} || echo host-tmp-invisible",
                "echo inside > /tmp/from-inside && echo tmp-writable",
            ]
        )
        out = await _run(reg, script)
    finally:
        shutil.rmtree(host_tmp)
    lines = out.content.split("\n")[1:-1]
    assert lines == [
        "ws-writable",
        "usr-readonly",
        "config-hidden",
        "db-hidden",
        "workspace",
        "keys-hidden",
        "host-tmp-invisible",
        "tmp-writable",
    ], out.content
    assert (ws / "made.txt").read_text() == "written\n"
    assert not Path("/usr/reverie-probe").exists() and not Path("/tmp/from-inside").exists()


@needs_bwrap
def test_a_home_inside_a_root_is_hidden_again(home: Home) -> None:
    # A root that holds the daemon's home (e.g. roots = ["~"]) must not expose it.
    outer = home.root.parent
    sandbox = Sandbox.for_workspace(
        (home.workspace_dir, outer), RunSettings(), home=home.root, environ={"PATH": "/bin"}
    )
    opts = sandbox.bwrap_options(cwd=home.workspace_dir)
    pairs = list(itertools.pairwise(opts))
    outer_bind = pairs.index(("--bind-try", str(outer)))
    rehide = [i for i, p in enumerate(pairs) if p == ("--tmpfs", str(home.root))][-1]
    rebind = [i for i, p in enumerate(pairs) if p == ("--bind-try", str(home.workspace_dir))][-1]
    assert outer_bind < rehide < rebind


@needs_bwrap
async def test_a_home_inside_a_root_stays_unreadable(home: Home) -> None:
    (home.root / "reverie.toml").write_text("# config\n")
    settings = Settings(tools=ToolsSettings(run=RunSettings()))
    ws = Workspace((home.workspace_dir, home.root.parent))
    reg = ToolRegistry()
    for tool in run_tools(ws, settings, home=home.root):
        reg.register(tool)
    out = await _run(reg, f"ls -A {home.root}; touch {home.workspace_dir}/w && echo ws-writable")
    assert out.content.split("\n")[1:3] == ["workspace", "ws-writable"]


# --- when there is no sandbox ---


def _sandbox(**run: Any) -> Sandbox:
    return Sandbox.for_workspace(
        (Path("/nonexistent-root"),),
        RunSettings(**run),
        home=Path("/nonexistent-home"),
        environ={},
        which=lambda _name: None,
        uid=1000,
    )


def test_without_bubblewrap_run_is_off_unless_allowed() -> None:
    auto = _sandbox()
    assert auto.mode == "off"
    assert auto.describe() == (
        "run: off (bubblewrap is not installed; install the bubblewrap package or set "
        "[tools.run] allow_unsandboxed = true)"
    )
    required = _sandbox(sandbox="bwrap", allow_unsandboxed=True)
    assert required.mode == "off" and "install the bubblewrap package" in required.reason
    none = _sandbox(sandbox="none")
    assert none.mode == "off" and "allow_unsandboxed = true" in none.reason
    bare = _sandbox(allow_unsandboxed=True)
    # Bare, a user's process count is every process of theirs: no limit is set.
    assert bare.describe() == "run: UNSANDBOXED (allow_unsandboxed, no process limit)"
    assert bare.mode == "bare" and "ulimit -u" not in " ".join(bare.argv("true", cwd=Path("/")))


@needs_bwrap
def test_with_bubblewrap_doctor_says_sandboxed() -> None:
    on = Sandbox.for_workspace((), RunSettings(network=True), home=Path("/nonexistent"), uid=1000)
    assert on.describe() == "run: sandboxed by bubblewrap (network on, at most 256 processes)"
    off = Sandbox.for_workspace((), RunSettings(), home=Path("/nonexistent"), uid=1000)
    assert off.describe() == "run: sandboxed by bubblewrap (network off, at most 256 processes)"


async def test_run_off_refuses_with_the_way_to_turn_it_on(home: Home) -> None:
    reg = _registry(home, sandbox="none")
    tool = reg.get("run")
    assert tool is not None and "Currently OFF" in tool.description
    out = await _run(reg, "touch ran-anyway")
    assert out.is_error and "allow_unsandboxed = true" in out.content
    assert not (home.workspace_dir / "ran-anyway").exists()
    # Nobody is asked to approve a command that could not run anyway.
    assert tool.preview is not None
    with pytest.raises(ToolError, match="allow_unsandboxed"):
        await tool.preview(CTX, {"command": "true"})


async def test_run_asks_by_default_and_names_its_subject(home: Home) -> None:
    tool = _registry(home, sandbox="none", allow_unsandboxed=True).get("run")
    assert tool is not None and tool.permission == "ask" and tool.subject == "command"
    assert tool.preview is not None
    shown = await tool.preview(CTX, {"command": "git status"})
    assert shown.startswith("$ git status\n") and "UNSANDBOXED" in shown


# --- under the service ---

UNITS = Path(__file__).resolve().parent.parent / "systemd"
_NAMESPACE_OF = {
    "--unshare-user-try": "user",
    "--unshare-pid": "pid",
    "--unshare-ipc": "ipc",
    "--unshare-uts": "uts",
    "--unshare-net": "net",
}


def _directives(unit: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


@pytest.mark.parametrize("unit", ["reverie.service", "reverie-user.service"])
def test_the_units_hardening_leaves_room_for_the_sandbox(unit: str) -> None:
    d = _directives(UNITS / unit)
    opts = Sandbox.for_workspace(
        (), RunSettings(), home=Path("/nonexistent"), which=lambda _n: "/usr/bin/bwrap"
    ).bwrap_options(cwd=Path("/"))
    needed = {"mnt"} | {_NAMESPACE_OF[o] for o in opts if o.startswith("--unshare")}
    assert needed <= set(d["RestrictNamespaces"].split())
    # The sandbox's loopback device is brought up over netlink.
    assert "AF_NETLINK" in d["RestrictAddressFamilies"].split()
    # Any mount over /proc stops the kernel from mounting a fresh /proc in a user namespace.
    for key in ("ProtectKernelTunables", "ProtectKernelLogs", "ProtectProc", "ProcSubset"):
        assert key not in d, key
    if "SystemCallFilter" in d:
        assert "@mount" in d["SystemCallFilter"].split()
    assert d["NoNewPrivileges"] == "yes"


@needs_bwrap
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to become an unprivileged user",
)
def test_the_sandbox_works_for_an_unprivileged_user(tmp_path: Path) -> None:
    # The service runs as its own user, with no_new_privs: bubblewrap then builds the
    # sandbox in a user namespace of its own.
    ws = Path(tempfile.mkdtemp(prefix="reverie-run-ws-", dir="/var/tmp"))
    try:
        os.chown(ws, 65534, 65534)
        sandbox = Sandbox.for_workspace((ws,), RunSettings(), home=tmp_path, environ={})
        argv = sandbox.argv("id -u; touch made && echo ws-writable; ls -A /tmp", cwd=ws)
        done = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
                *argv,
            ],
            capture_output=True,
            text=True,
            env=sandbox.env(),
            cwd=ws,
            timeout=30,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, "65534\nws-writable\n", "")
    finally:
        shutil.rmtree(ws)


@needs_bwrap
def test_the_probe_starts_a_sandbox_and_tells_why_one_cannot_start(tmp_path: Path) -> None:
    sandbox = Sandbox.for_workspace(
        (tmp_path, tmp_path / "not-made-yet"), RunSettings(), home=tmp_path
    )
    assert sandbox.probe() is None
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the failing half needs root and unshare to cover /proc/sys")
    # What ProtectKernelTunables= does to /proc: a fresh /proc can no longer be mounted.
    code = (
        "from pathlib import Path; from daemon.settings import RunSettings; "
        "from daemon.tools.sandbox import Sandbox; "
        f"print(Sandbox.for_workspace((Path({str(tmp_path)!r}),), RunSettings(), "
        f"home=Path({str(tmp_path)!r})).probe())"
    )
    script = (
        "mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys /proc/sys && "
        f'exec {sys.executable} -c "$0"'
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script, code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert (
        done.stdout.strip() == "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"
    ), done.stderr


def _doctor_run(home: Path, config: str) -> tuple[int, dict[str, Any]]:
    from daemon.cli import main

    (home / "reverie.toml").write_text(config)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["doctor", "--home", str(home), "--json"])
    return code, next(c for c in json.loads(out.getvalue()) if c["name"] == "run")


def test_doctor_says_how_run_is_confined(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run as root here, the process limit is a pids cgroup; as any other user, RLIMIT_NPROC.
    how = " (a pids cgroup)" if os.getuid() == 0 else ""
    if shutil.which("bwrap"):
        code, check = _doctor_run(home.root, "")
        assert check == {
            "name": "run",
            "status": "ok",
            "detail": f"sandboxed by bubblewrap (network off, at most 256 processes{how})",
            "fix": "",
        }
    # A PATH without bubblewrap on it: the machine as one without the package.
    monkeypatch.setenv("PATH", str(tmp_path))
    code, check = _doctor_run(home.root, "")
    assert (code, check["status"]) == (0, "warn")
    assert check["detail"] == (
        "off (bubblewrap is not installed; install the bubblewrap package or set "
        "[tools.run] allow_unsandboxed = true)"
    )
    code, check = _doctor_run(home.root, '[tools.run]\nsandbox = "bwrap"\n')
    assert (code, check["status"]) == (1, "fail") and "bubblewrap package" in check["detail"]
    code, check = _doctor_run(home.root, "[tools.run]\nallow_unsandboxed = true\n")
    limit = ", at most 256 processes (a pids cgroup)" if how else ", no process limit"
    assert (
        check["status"] == "warn" and check["detail"] == f"UNSANDBOXED (allow_unsandboxed{limit})"
    )


# --- through the real daemon ---

DAEMON_CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
trunk = ["run", "recall"]

[tools.run]
env = ["PATH", "LANG", "DATABASE_URL", "CACHE_URL"]

[permissions]
# An allow for a command holds every shell operator the command uses.
rules = [{ tool = "run", match = "echo sandboxed-$((6 * 7)); env; cat ../reverie.toml || echo *", decision = "allow" }]
"""
)


@needs_bwrap
def test_the_daemon_runs_a_command_in_the_sandbox_without_its_key(tmp_path: Path) -> None:
    from tests.fakes.anthropic_server import FakeAnthropic, Planned
    from tests.harness import Client, DaemonProcess, daemon_env

    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(DAEMON_CONFIG)
    command = "echo sandboxed-$((6 * 7)); env; cat ../reverie.toml || echo config-hidden"
    with FakeAnthropic() as fake:
        fake.enqueue(
            Planned.tool("run", {"command": command}),
            Planned(text="The command printed 42."),
        )
        key = "sk-ant-api03-" + secrets.token_hex(16)
        password = secrets.token_hex(8)
        d = DaemonProcess(
            home=home,
            env=daemon_env(
                {
                    "ANTHROPIC_API_KEY": key,
                    "REVERIE_ANTHROPIC_BASE_URL": fake.url,
                    # Listed in [tools.run] env: the one with a password never reaches it.
                    "DATABASE_URL": f"postgres://app:{password}@db.internal/app",
                    "CACHE_URL": "redis://cache.internal:6379/0",
                }
            ),
        )
        d.start()
        try:
            with Client(d.socket_path, timeout=60) as c:
                c.hello()
                _, frames = c.chat("Run the sum in the workspace, please.")
        finally:
            d.stop()
        requests = fake.message_requests
    assert frames[-1]["type"] == "done" and "42" in frames[-1]["text"]
    assert len(requests) == 2
    result = json.dumps(requests[1].body["messages"][-1])
    assert "exit code: 0" in result and "sandboxed-42" in result and "config-hidden" in result
    assert key not in result and "ANTHROPIC_API_KEY" not in result
    assert password not in result and "DATABASE_URL" not in result
    assert "CACHE_URL=redis://cache.internal:6379/0" in result
    assert "[providers.anthropic]" not in result
