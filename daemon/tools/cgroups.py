"""A pids cgroup per command: the process limit that holds when the daemon runs as root.

The kernel never applies RLIMIT_NPROC to root's processes (uid 0 is exempt, whatever its
capabilities), so for a daemon run as root the sandbox's process limit is a cgroup of the
`pids` controller made for each command, with `pids.max` set before the command's first
process joins it: every fork or thread past the limit fails with EAGAIN inside the sandbox.

Where one can be made: cgroup v1's `pids` hierarchy (a child of the daemon's own cgroup), or
cgroup v2 when the daemon sits at the root of its cgroup namespace (a container) — below
that, cgroup v2 lets a cgroup that holds processes (the daemon's own) have only threaded
children, which a command cannot be moved into. Cgroups are named
`reverie-run-<pid namespace>-<daemon pid>-<n>`; one left behind by a daemon of this pid
namespace that died (with its processes, if the kernel had not ended them yet) is killed and
removed the next time a daemon looks.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "reverie-run-"


@dataclass(kw_only=True)
class PidsCgroups:
    """Where this daemon makes its commands' pids cgroups (`base`), and how it names them."""

    base: Path
    _serial: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def find(cls, *, proc: Path = Path("/proc/self")) -> PidsCgroups | None:
        """The pids hierarchy this process may make child cgroups in, or None.

        Checked by making (and removing) one with a limit, so None also covers a read-only
        cgroup file system and a user without the right to write there.
        """
        base = _pids_base(proc)
        if base is None:
            return None
        found = cls(base=base)
        found.sweep()
        try:
            found.remove(found.make(1), wait_s=0.0)
        except OSError:
            return None
        return found

    def make(self, max_processes: int) -> Path:
        """A new, empty cgroup whose tasks (processes and threads) number at most the limit."""
        path = self.base / f"{PREFIX}{_pid_namespace()}-{os.getpid()}-{next(self._serial)}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(f"{int(max_processes)}\n")
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return path

    def remove(self, path: Path, *, wait_s: float = 2.0) -> bool:
        """Remove `path` once its last task is gone (reaped); False if it is still busy."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.02)

    def sweep(self) -> None:
        """Kill and remove the cgroups of daemons that are no longer running."""
        try:
            entries = list(self.base.iterdir())
        except OSError:
            return
        ours = _pid_namespace()
        for path in entries:
            # Only a daemon of this pid namespace can be looked for by its pid.
            ns, _, rest = path.name.removeprefix(PREFIX).partition("-")
            owner = rest.split("-", 1)[0]
            if not path.name.startswith(PREFIX) or ns != ours or not owner.isdigit():
                continue
            if Path(f"/proc/{owner}").exists():
                continue
            for pid in members(path):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.remove(path, wait_s=1.0)


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return "0"


def members(path: Path) -> set[int]:
    """The processes in cgroup `path` (none when it is gone)."""
    try:
        return {int(p) for p in (path / "cgroup.procs").read_text().split()}
    except (OSError, ValueError):
        return set()


def _pids_base(proc: Path) -> Path | None:
    """The directory of this process's own cgroup in a pids hierarchy that can hold children."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        own = (proc / "cgroup").read_text()
    except OSError:
        return None
    v1 = v2 = None
    for line in own.splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            v2 = path
        elif "pids" in controllers.split(","):
            v1 = path
    for line in mountinfo.splitlines():
        # <id> <parent> <dev> <root> <mount point> <options> [optional...] - <fs> <src> <super>
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point, fstype = fields[3], fields[4], tail[0]
        if fstype == "cgroup" and v1 is not None and "pids" in tail[2].split(","):
            return _below(Path(mount_point), root, v1)
        if fstype == "cgroup2" and v2 is not None:
            base = _below(Path(mount_point), root, v2)
            if base is not None and _v2_pids_at_root(base, Path(mount_point)):
                return base
    return None


def _below(mount_point: Path, root: str, own: str) -> Path | None:
    """Where the cgroup `own` lies under a mount of the hierarchy's `root`."""
    if own != root and not own.startswith(root.rstrip("/") + "/"):
        return None
    rel = own[len(root) :].strip("/")
    return mount_point / rel if rel else mount_point


def _v2_pids_at_root(base: Path, mount_point: Path) -> bool:
    # Only the root of a (namespaced) hierarchy may hold processes and have domain children.
    if base != mount_point:
        return False
    try:
        if "pids" not in (base / "cgroup.controllers").read_text().split():
            return False
        if "pids" not in (base / "cgroup.subtree_control").read_text().split():
            (base / "cgroup.subtree_control").write_text("+pids\n")
    except OSError:
        return False
    return True
