"""The `run` tool: one shell command in the sandbox, with a time limit and an output cap.

A command runs in its own session (so its own process group); nothing it starts outlives the
call. When it ends, times out, or the turn that asked for it is cancelled, the whole tree gets
SIGTERM, a short grace, then SIGKILL, and is reaped before the call returns. Under bubblewrap
the tree lives in its own pid namespace, found by the namespace bubblewrap reports, so even a
child that detached with setsid is found and dies with it; bare (unsandboxed) commands are
stopped by process group and by walking their descendants. A command given a pids cgroup (the
process limit of a daemon run as root) is found by its cgroup too, and the cgroup is removed
once the command's processes are gone.

Output (stdout and stderr interleaved, as a terminal would show them) is read while the command
runs and kept as a bounded head and tail, so a command that prints gigabytes costs a few
hundred kilobytes of memory and the model sees how its output began and how it ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream, Process

from daemon.log import get_logger
from daemon.redact import Redactor
from daemon.settings import RunSettings, Settings
from daemon.tools.cgroups import members as cgroup_members
from daemon.tools.registry import Tool, ToolContext, ToolError
from daemon.tools.sandbox import Sandbox
from daemon.tools.workspace import Workspace

log = get_logger("tools.run")

# SIGTERM first, then this long before SIGKILL: enough for a test runner to write its report.
KILL_GRACE_S = 1.0
# After the command's first process exits, how long its output may keep arriving.
DRAIN_S = 0.2
# Bytes of output kept for each of the head and the tail, per character the model may read.
_BYTES_PER_CHAR = 4
# Kept above the configured time limit so the registry's own deadline never cuts a call short.
_REGISTRY_MARGIN_S = 30.0

_SIGNAL_MEANING = {
    signal.SIGXCPU: "the CPU-time limit",
    signal.SIGKILL: "killed",
    signal.SIGSEGV: "a segmentation fault, or the memory limit",
    signal.SIGTERM: "terminated",
    signal.SIGPIPE: "a closed pipe",
}


class Capture:
    """The first and the last bytes of a stream, and how many there were in all."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.finished = anyio.Event()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    async def drain(self, stream: ByteReceiveStream) -> None:
        try:
            async for chunk in stream:
                self.add(chunk)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self.finished.set()

    def text(self, max_chars: int) -> str:
        """The output as text of at most about `max_chars`, head and tail kept when cut."""
        dropped = self.total - len(self.head) - len(self.tail)
        half = max(1, max_chars // 2)
        if dropped == 0:
            whole = (bytes(self.head) + bytes(self.tail)).decode("utf-8", errors="replace")
            if len(whole) <= max_chars:
                return whole
            head, tail = whole[:half], whole[-half:]
        else:
            head = self.head.decode("utf-8", errors="replace")[:half]
            tail = self.tail.decode("utf-8", errors="replace")[-half:]
        return (
            f"{head}\n[… output cut: {self.total:,} bytes in all; the beginning and the end "
            f"are shown …]\n{tail}"
        )


@dataclass(frozen=True, kw_only=True)
class Completed:
    exit_code: int | None
    duration_s: float
    timed_out: bool
    output: str


async def execute(
    sandbox: Sandbox, command: str, *, cwd: Path, timeout_s: float, max_chars: int
) -> Completed:
    """Run `command` confined by `sandbox`; stop its whole tree when done.

    On timeout the tree is stopped and `timed_out` is set. On cancellation the tree is stopped
    and reaped under a shield (bounded by the kill grace), then the cancellation propagates.
    """
    try:
        cgroup = sandbox.make_cgroup()
    except OSError as exc:
        raise ToolError(f"could not make the command's process-limit cgroup: {exc}") from exc
    try:
        return await _execute(
            sandbox, command, cwd=cwd, timeout_s=timeout_s, max_chars=max_chars, cgroup=cgroup
        )
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(sandbox.remove_cgroup, cgroup)


async def _execute(
    sandbox: Sandbox,
    command: str,
    *,
    cwd: Path,
    timeout_s: float,
    max_chars: int,
    cgroup: Path | None,
) -> Completed:
    capture = Capture(max_chars * _BYTES_PER_CHAR)
    # bubblewrap says which pid namespace the sandbox is (its processes are found by it).
    status_r, status_w = os.pipe() if sandbox.mode == "bwrap" else (-1, -1)
    started = time.monotonic()
    try:
        process = await anyio.open_process(
            sandbox.argv(
                command, cwd=cwd, status_fd=status_w if status_w >= 0 else None, cgroup=cgroup
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=sandbox.env(),
            start_new_session=True,
            pass_fds=(status_w,) if status_w >= 0 else (),
        )
    except BaseException:
        _close(status_r, status_w)
        raise
    _close(status_w)
    tree = _CommandTree(process, status_r, cgroup)
    stopped = False
    try:
        async with anyio.create_task_group() as tg:
            assert process.stdout is not None
            tg.start_soon(capture.drain, process.stdout)
            with anyio.move_on_after(timeout_s) as deadline:
                await process.wait()
            duration = time.monotonic() - started
            # What is still in the pipe when the first process exits belongs to the result;
            # anything still holding the pipe open after that is a leftover, stopped below.
            with anyio.move_on_after(DRAIN_S):
                await capture.finished.wait()
            with anyio.CancelScope(shield=True):
                await tree.stop()
                stopped = True
            with anyio.move_on_after(DRAIN_S):
                await capture.finished.wait()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if not stopped:
                await tree.stop()
            await process.aclose()
            _close(status_r)
    return Completed(
        exit_code=None if deadline.cancelled_caught else process.returncode,
        duration_s=duration,
        timed_out=deadline.cancelled_caught,
        output=capture.text(max_chars),
    )


class _CommandTree:
    """The processes one command started: its group, its descendants, its pid namespace."""

    def __init__(self, process: Process, status_fd: int, cgroup: Path | None = None) -> None:
        self.process = process
        self.status_fd = status_fd
        self.cgroup = cgroup
        self.pid_ns: str | None = None

    def _namespace(self) -> str | None:
        # bubblewrap writes the sandbox's pid namespace right after creating it; the status
        # pipe is read without blocking, so a sandbox not yet made is simply not looked for.
        if self.pid_ns is None and self.status_fd >= 0:
            os.set_blocking(self.status_fd, False)
            try:
                data = os.read(self.status_fd, 65536)
            except (BlockingIOError, OSError):
                data = b""
            for line in data.splitlines():
                with contextlib.suppress(ValueError):
                    ns = json.loads(line).get("pid-namespace")
                    if isinstance(ns, int):
                        self.pid_ns = f"pid:[{ns}]"
        return self.pid_ns

    def members(self) -> set[int]:
        # Descendants are followed only while the first process is unreaped: after that its
        # pid may belong to another process. Its group id stays reserved while members live.
        found = _tree(
            self.process.pid,
            descendants=self.process.returncode is None,
            pid_ns=self._namespace(),
        )
        # Whatever is in the command's cgroup is the command's, however it left the group.
        return found | cgroup_members(self.cgroup) if self.cgroup is not None else found

    async def stop(self) -> None:
        """SIGTERM to every member, a grace, SIGKILL to what is left; reap the first process.

        bubblewrap exits as soon as the command does, while the sandbox's other processes are
        still being killed with their namespace: this returns only once they are gone too.
        """
        first = await self._members()
        if not first:
            await self.process.wait()
            return
        _signal(first, signal.SIGTERM)
        await self._until_gone(KILL_GRACE_S)
        left = await self._members()
        if left:
            _signal(left, signal.SIGKILL)
        # SIGKILL cannot be refused; the waits are bounded only in case the kernel is slow.
        with anyio.move_on_after(5.0):
            await self.process.wait()
        await self._until_gone(5.0)

    async def _until_gone(self, seconds: float) -> None:
        # Processes outside our children cannot be waited for, only looked for: poll /proc.
        deadline = anyio.current_time() + seconds
        while anyio.current_time() < deadline:
            if self.process.returncode is not None and not await self._members():
                return
            await anyio.sleep(0.02)

    async def _members(self) -> set[int]:
        # A scan of /proc takes milliseconds on a busy machine: off the event loop.
        return await anyio.to_thread.run_sync(self.members)


def _close(*fds: int) -> None:
    for fd in fds:
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _tree(root: int, *, descendants: bool, pid_ns: str | None = None) -> set[int]:
    """Live processes in `root`'s process group or in the pid namespace `pid_ns`, and those
    descended from `root` or from one of them when `descendants` (zombies do not count)."""
    children: dict[int, list[int]] = {}
    members: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces or ')': split after the last.
        fields = stat[stat.rfind(b")") + 2 :].split()
        state, ppid, pgrp = fields[0], int(fields[1]), int(fields[2])
        if state in (b"Z", b"X"):
            continue
        pid = int(entry.name)
        children.setdefault(ppid, []).append(pid)
        if pgrp == root:
            members.add(pid)
        elif pid_ns is not None:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/pid") == pid_ns:
                    members.add(pid)
    alive = set(members)
    todo = [root, *members] if descendants else []
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in alive:
                alive.add(child)
                todo.append(child)
    return alive


def _exit_line(done: Completed, sandbox: Sandbox) -> str:
    code = done.exit_code
    assert code is not None
    # A shell, and bubblewrap for its sandboxed child, report death by signal N as 128 + N;
    # Python reports a bare process's as -N.
    signo = -code if code < 0 else code - 128 if code > 128 else 0
    line = f"exit code: {code} · {done.duration_s:.2f} s"
    try:
        name = signal.Signals(signo).name if signo else ""
    except ValueError:
        name = ""
    if name:
        meaning = _SIGNAL_MEANING.get(signal.Signals(signo), "")
        if signo == signal.SIGXCPU:
            meaning += f" of {sandbox.settings.cpu_seconds} s"
        line += f" (killed by {name}" + (f": {meaning}" if meaning else "") + ")"
    return line


def run_tools(workspace: Workspace, settings: Settings, *, home: Path) -> list[Tool]:
    """The `run` tool for this workspace, confined as `[tools.run]` says (or off, saying why)."""
    conf = settings.tools.run
    sandbox = Sandbox.for_workspace(workspace.roots, conf, home=home)
    # Said once at start: a `run` that is off or bare is worth a line in the log.
    if sandbox.mode == "bwrap":
        log.info("run tool ready", confinement=sandbox.describe())
    else:
        log.warning("run tool not sandboxed", confinement=sandbox.describe())
    runner = _Runner(workspace, sandbox, conf)
    return [
        Tool(
            name="run",
            description=_description(conf, sandbox),
            input_schema={
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 20_000,
                        "description": "The shell command, e.g. `pytest -q tests/test_x.py`.",
                    },
                    "cwd": {
                        "type": "string",
                        "description": "Directory to run in, inside the workspace (default: its root).",
                    },
                    "timeout_s": {
                        "type": "number",
                        "minimum": 1,
                        "maximum": conf.max_timeout_s,
                        "description": f"Time limit in seconds (default {conf.timeout_s:g}).",
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
            },
            handler=runner.run,
            preview=runner.preview,
            timeout_s=conf.max_timeout_s + KILL_GRACE_S + _REGISTRY_MARGIN_S,
            # The tool cuts its own output (head and tail); room for the status line.
            max_output_chars=conf.output_max_chars + 400,
            permission="ask",
            subject="command",
        )
    ]


class _Runner:
    """The `run` tool's handlers: one command in the sandbox, and its preview."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, conf: RunSettings) -> None:
        self.workspace = workspace
        self.sandbox = sandbox
        self.conf = conf
        self.redactor = Redactor()

    def where(self, args: dict[str, Any]) -> Path:
        cwd = self.workspace.resolve(args.get("cwd") or ".")
        if not cwd.is_dir():
            raise ToolError(f"cwd {args.get('cwd')!r} is not a directory")
        return cwd

    async def preview(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        if self.sandbox.mode == "off":
            raise ToolError(self.sandbox.reason)
        return self.sandbox.shown(args["command"], cwd=self.where(args))

    async def run(self, ctx: ToolContext, args: dict[str, Any]) -> str:
        sandbox, conf = self.sandbox, self.conf
        if sandbox.mode == "off":
            raise ToolError(sandbox.reason)
        command: str = args["command"]
        if "\x00" in command:
            raise ToolError("the command holds a NUL character")
        cwd = self.where(args)
        timeout_s = float(args.get("timeout_s") or conf.timeout_s)
        done = await execute(
            sandbox, command, cwd=cwd, timeout_s=timeout_s, max_chars=conf.output_max_chars
        )
        log.info(
            "run finished",
            command=self.redactor.mask(command[:200]),
            cwd=str(cwd),
            sandbox=sandbox.mode,
            exit_code=done.exit_code,
            timed_out=done.timed_out,
            duration_ms=round(done.duration_s * 1000),
            session=ctx.session_id,
        )
        output = done.output or "(no output)"
        if done.timed_out:
            raise ToolError(
                f"timed out after {timeout_s:g} s: the command and everything it started were "
                f"stopped. Output so far:\n{output}"
            )
        first = output.split("\n", 1)[0]
        if sandbox.mode == "bwrap" and done.exit_code == 1 and first.startswith("bwrap: "):
            raise ToolError(
                f"the sandbox could not start ({first}); `reverie doctor` checks the setup"
            )
        if done.exit_code == 125 and first.startswith("reverie: could not join"):
            raise ToolError(f"the command did not run: {first.removeprefix('reverie: ')}")
        return f"{_exit_line(done, sandbox)}\n{output}"


def _description(conf: RunSettings, sandbox: Sandbox) -> str:
    """What the model reads about `run`: its confinement and its limits, as configured."""
    network = "the network is reachable" if conf.network else "no network"
    if sandbox.mode == "bwrap":
        confinement = (
            "It runs in a sandbox: the workspace is writable, the rest of the system read-only, "
            f"/tmp private and empty, {network}, no keys or tokens in the environment"
        )
    elif sandbox.mode == "bare":
        confinement = "It runs WITHOUT a sandbox (allowed by the config), with no keys or tokens in the environment"
    else:
        confinement = f"Currently OFF ({sandbox.reason}); a call only returns that reason"
    processes = (
        f"{conf.max_processes} processes and threads at once, "
        if sandbox.nproc_rlimit or sandbox.cgroups is not None
        else ""
    )
    description = (
        "Run a shell command (bash) in the workspace and return its exit code and output "
        "(stdout and stderr together; long output keeps its beginning and end). "
        f"{confinement}; limits: {conf.cpu_seconds} s of CPU, {conf.memory_mb} MB of memory, "
        f"{processes}{conf.timeout_s:g} s of time unless timeout_s says otherwise (at most "
        f"{conf.max_timeout_s:g} s). Everything the command starts is stopped when it ends. "
        "stdin is empty: nothing interactive."
    )
    return description
