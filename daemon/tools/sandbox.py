"""How a `run` command is confined: bubblewrap when it can be had, bare only when allowed.

Under bubblewrap a command sees the system read-only, the workspace roots writable at their own
paths, an empty private /tmp and /run, its own /dev and /proc, no network unless the config
allows it, and none of the daemon's home: the home (memory, database, config), the user's home
directory and the places keys live are covered by empty tmpfs mounts, and only the workspace
roots inside them are bound back. It runs in its own user, pid, ipc and uts namespaces, so when
the sandbox's first process ends every process it started ends with it, however it detached.

Without bubblewrap a command runs bare only when `[tools.run] allow_unsandboxed` says so;
otherwise `run` is off and says how to turn it on. Either way the command gets a scrubbed
environment (only the listed variables, never one that looks like a key, token, secret or
password, nor one that leads out of the sandbox: a bus, an agent socket, nor a value that carries
a credential: a key's shape, a URL with a password) and its CPU-time and address-space limits,
set by the shell that starts it so no process of the tree can raise them.

The number of processes (and threads) a sandboxed command may have at once is limited too, in
the way that holds for the user the daemon runs as. For any user but root it is RLIMIT_NPROC,
set inside the sandbox: the kernel (5.14 and later) counts it per user namespace, so it counts
the sandbox's own processes, not the daemon's or another command's. The kernel never applies
RLIMIT_NPROC to root, so a daemon run as root puts each command in a pids cgroup of its own
(daemon/tools/cgroups.py); where it cannot make one, `run` is off and says why.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from daemon.redact import Redactor
from daemon.settings import RunSettings
from daemon.tools.cgroups import PidsCgroups

BWRAP_PACKAGE = "bubblewrap"
Mode = Literal["bwrap", "bare", "off"]

# Variable names never passed to a command, even when listed: secrets by name, and the ways
# out of the sandbox (a session bus, an ssh or gpg agent, systemd's sockets and credentials).
_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH|COOKIE|SESSION|SOCK|BUS_ADDRESS|NOTIFY|"
    r"RUNTIME_DIR|LISTEN_FD|PRIVATE",
    re.IGNORECASE,
)
_VALUE_CHECK = Redactor()
# Directories a hidden path must never cover: the system the command runs.
_SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/etc", "/sbin")


# The authority of a URL (`scheme://authority/...`): where a `user:password@` would be.
_URL_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#\s]*)")


def url_with_password(value: str) -> bool:
    """Whether `value` holds a URL whose user information carries a password.

    `postgres://u:secret@db/x`, `https://:token@host`; not `ssh://git@host`, nor a port.
    """
    for authority in _URL_AUTHORITY.findall(value):
        userinfo, at, _host = authority.rpartition("@")
        if at and userinfo.partition(":")[2]:
            return True
    return False


def scrubbed_env(names: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The listed variables that are set, minus anything that looks like a secret."""
    out: dict[str, str] = {}
    for name in names:
        value = environ.get(name)
        if value is None or _SECRET_NAME.search(name):
            continue
        # A value with a key's shape, or a URL with a password in it, is dropped whatever its
        # variable is called (DATABASE_URL=postgres://app:secret@db/app).
        if _VALUE_CHECK.mask(value) != value or url_with_password(value):
            continue
        out[name] = value
    return out


def shell() -> str:
    """The shell commands are written for: bash where installed (models write bash), else sh."""
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def limited(command: str, *, cpu_seconds: int, memory_mb: int, max_processes: int = 0) -> list[str]:
    """argv running `command` in a shell whose CPU-time and address-space limits are set first.

    The hard limits are lowered too, so nothing the command starts can raise them again; the
    CPU limit's hard one a second later than its soft one, so the kernel sends SIGXCPU (which
    says why) before SIGKILL. `max_processes` (0: none) sets RLIMIT_NPROC. If a limit cannot
    be set the command does not run.
    """
    sh = shell()
    cpu = int(cpu_seconds)
    nproc = f"ulimit -u {int(max_processes)} && " if max_processes > 0 else ""
    prologue = (
        f"ulimit -S -t {cpu} && ulimit -H -t {cpu + 1} && ulimit -v {int(memory_mb) * 1024} "
        f'&& {nproc}exec {sh} -c "$1"'
    )
    return [sh, "-c", prologue, "reverie-run", command]


# Run outside the sandbox, before bubblewrap: the shell joins the command's pids cgroup, then
# becomes bubblewrap, so every process of the sandbox is born inside the cgroup.
_JOIN_CGROUP = (
    'echo $$ 2>/dev/null > "$0" || '
    '{ echo "reverie: could not join the process-limit cgroup ${0%/*}" >&2; exit 125; }; '
    'exec "$@"'
)


@dataclass(frozen=True, kw_only=True)
class Sandbox:
    """Where and how commands run for one workspace; `mode` says whether they run at all."""

    mode: Mode
    settings: RunSettings
    roots: tuple[Path, ...]
    # Directories covered by an empty tmpfs (the daemon's home, the user's home, key stores).
    hidden: tuple[Path, ...] = ()
    bwrap: str | None = None
    # Why `run` is off, and how to turn it on (empty unless mode is "off").
    reason: str = ""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # How the process limit holds: RLIMIT_NPROC inside the sandbox's user namespace, and/or a
    # pids cgroup per command (`cgroups`, for a daemon run as root).
    nproc_rlimit: bool = False
    cgroups: PidsCgroups | None = None

    @classmethod
    def for_workspace(
        cls,
        roots: Iterable[Path],
        settings: RunSettings,
        *,
        home: Path,
        environ: Mapping[str, str] | None = None,
        which: Callable[[str], str | None] = shutil.which,
        uid: int | None = None,
        find_cgroups: Callable[[], PidsCgroups | None] = PidsCgroups.find,
    ) -> Sandbox:
        """The sandbox the configuration asks for, or "off" with the reason when it cannot be had.

        `uid` is the user commands run as (default: this process's real uid); `find_cgroups`
        where root's commands get their pids cgroups.
        """
        env = dict(os.environ if environ is None else environ)
        root_paths = tuple(Path(os.path.realpath(r)) for r in roots)
        bwrap = which("bwrap") if settings.sandbox != "none" else None
        mode: Mode
        reason = ""
        if bwrap is not None:
            mode = "bwrap"
        elif settings.sandbox == "bwrap":
            mode = "off"
            reason = (
                f'run is off: [tools.run] sandbox = "bwrap" but bubblewrap is not installed; '
                f"install the {BWRAP_PACKAGE} package (apt-get install {BWRAP_PACKAGE})"
            )
        elif settings.allow_unsandboxed:
            mode = "bare"
        elif settings.sandbox == "none":
            mode = "off"
            reason = (
                'run is off: [tools.run] sandbox = "none" and commands may not run unsandboxed; '
                f'install the {BWRAP_PACKAGE} package and set sandbox = "auto", or set '
                "[tools.run] allow_unsandboxed = true"
            )
        else:
            mode = "off"
            reason = (
                f"run is off: bubblewrap is not installed; install the {BWRAP_PACKAGE} package "
                "or set [tools.run] allow_unsandboxed = true"
            )
        nproc_rlimit = False
        cgroups = None
        if mode != "off" and settings.max_processes > 0:
            if (os.getuid() if uid is None else uid) != 0:
                # Bare, there is no user namespace of its own: RLIMIT_NPROC would count every
                # process of the user (a desktop's browser threads included), not the command's.
                nproc_rlimit = mode == "bwrap"
            else:
                cgroups = find_cgroups()
                if cgroups is None and mode == "bwrap":
                    mode = "off"
                    reason = (
                        "run is off: the daemon runs as root, where the kernel ignores the "
                        "process limit, and no pids cgroup can be made here for "
                        "[tools.run] max_processes; run the daemon as its own user (as the "
                        "shipped units do), or set max_processes = 0 to run commands without "
                        "a process limit"
                    )
        return cls(
            mode=mode,
            settings=settings,
            roots=root_paths,
            hidden=_hidden_dirs(home, env),
            bwrap=bwrap,
            reason=reason,
            environ=env,
            nproc_rlimit=nproc_rlimit,
            cgroups=cgroups,
        )

    def describe(self) -> str:
        """One line for `reverie doctor`: whether commands run, and how they are confined."""
        if self.mode == "bwrap":
            net = "on" if self.settings.network else "off"
            return f"run: sandboxed by bubblewrap (network {net}{self._limit_note()})"
        if self.mode == "bare":
            return f"run: UNSANDBOXED (allow_unsandboxed{self._limit_note()})"
        return "run: off (" + self.reason.removeprefix("run is off: ") + ")"

    def _limit_note(self) -> str:
        if self.cgroups is not None:
            return f", at most {self.settings.max_processes} processes (a pids cgroup)"
        if self.nproc_rlimit:
            return f", at most {self.settings.max_processes} processes"
        return ", no process limit"

    def env(self) -> dict[str, str]:
        """The command's whole environment: the listed variables, scrubbed."""
        env = scrubbed_env(self.settings.env, self.environ)
        if self.mode == "bwrap":
            # A fresh, writable home for tools that want one (git, pip); gone with the sandbox.
            env["HOME"] = "/tmp"
        return env

    def argv(
        self,
        command: str,
        *,
        cwd: Path,
        status_fd: int | None = None,
        cgroup: Path | None = None,
    ) -> list[str]:
        """argv that runs `command` (a shell string) in `cwd`, confined and limited.

        Under bubblewrap, `status_fd` receives its JSON status lines (the sandbox's pid
        namespace among them); the sandboxed command does not inherit it. With `cgroup` (made
        by `cgroups.make`), everything runs inside that cgroup from its first process on.
        """
        if self.mode == "off":
            raise RuntimeError(self.reason)
        inner = limited(
            command,
            cpu_seconds=self.settings.cpu_seconds,
            memory_mb=self.settings.memory_mb,
            max_processes=self.settings.max_processes if self.nproc_rlimit else 0,
        )
        if self.mode == "bare":
            argv = inner
        else:
            assert self.bwrap is not None
            status = [] if status_fd is None else ["--json-status-fd", str(status_fd)]
            argv = [self.bwrap, *status, *self.bwrap_options(cwd=cwd), "--", *inner]
        if cgroup is None:
            return argv
        return ["/bin/sh", "-c", _JOIN_CGROUP, str(cgroup / "cgroup.procs"), *argv]

    def make_cgroup(self) -> Path | None:
        """A fresh pids cgroup for one command, when this sandbox limits processes by cgroup."""
        if self.cgroups is None:
            return None
        return self.cgroups.make(self.settings.max_processes)

    def remove_cgroup(self, cgroup: Path | None) -> None:
        """Remove a command's cgroup once its processes are gone (kept, if any linger)."""
        if self.cgroups is not None and cgroup is not None:
            self.cgroups.remove(cgroup)

    def bwrap_options(self, *, cwd: Path) -> list[str]:
        """bubblewrap's options; the mounts are applied in order, later ones over earlier ones."""
        opts = [
            "--die-with-parent",
            # A new session: the command cannot push keystrokes into a terminal (TIOCSTI).
            "--new-session",
            # No cgroup namespace: the systemd unit's RestrictNamespaces= does not allow one.
            "--unshare-user-try",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
        ]
        if not self.settings.network:
            opts.append("--unshare-net")
        opts += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        opts += ["--tmpfs", "/tmp", "--tmpfs", "/run"]
        if self.settings.network:
            # /etc/resolv.conf points here on systemd-resolved machines.
            opts += ["--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve"]
        fresh = (Path("/tmp"), Path("/run"))
        for path in self.hidden:
            # Under the fresh /tmp or /run it is hidden already (and a mount would leave its
            # directory names behind there).
            if not any(path == f or _strictly_under(path, f) for f in fresh):
                opts += ["--tmpfs", str(path)]
        # -try: a configured root that does not exist (yet) is left out, not a failed sandbox.
        for root in self.roots:
            opts += ["--bind-try", str(root), str(root)]
        # A hidden directory inside a root (the daemon's home under a root such as ~) was
        # uncovered by that root's bind: cover it again, then bring back the roots inside it.
        for path in self.hidden:
            if any(_strictly_under(path, root) for root in self.roots):
                opts += ["--tmpfs", str(path)]
                for root in self.roots:
                    if _strictly_under(root, path) or root == path:
                        opts += ["--bind-try", str(root), str(root)]
        opts += ["--chdir", str(cwd)]
        return opts

    def probe(self, *, timeout_s: float = 20.0) -> str | None:
        """Start one sandbox that does nothing: None when it works, else what went wrong."""
        if self.mode != "bwrap":
            return None
        cwd = next((r for r in self.roots if r.is_dir()), Path("/"))
        try:
            cgroup = self.make_cgroup()
        except OSError as exc:
            return f"cannot make a pids cgroup: {exc}"
        try:
            done = subprocess.run(
                self.argv("true", cwd=cwd, cgroup=cgroup),
                capture_output=True,
                text=True,
                env=self.env(),
                cwd=cwd,
                timeout=timeout_s,
                start_new_session=True,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            self.remove_cgroup(cgroup)
        if done.returncode == 0:
            return None
        said = (done.stderr or done.stdout).strip().splitlines()
        return said[0] if said else f"bwrap exited with {done.returncode}"

    def shown(self, command: str, *, cwd: Path) -> str:
        """The command as a person reads it before approving it."""
        where = {
            "bwrap": f"sandboxed, network {'on' if self.settings.network else 'off'}",
            "bare": "UNSANDBOXED",
            "off": "off",
        }[self.mode]
        return f"$ {command}\n(in {cwd}; {where})"


def _hidden_dirs(home: Path, environ: Mapping[str, str]) -> tuple[Path, ...]:
    candidates = [home]
    user_home = environ.get("HOME") or os.path.expanduser("~")
    candidates.append(Path(user_home))
    for name in ("CREDENTIALS_DIRECTORY", "XDG_RUNTIME_DIR", "RUNTIME_DIRECTORY"):
        if environ.get(name):
            candidates += [Path(p) for p in environ[name].split(":") if p]
    candidates += [Path("/root"), Path("/etc/reverie")]
    seen: dict[Path, None] = {}
    for raw in candidates:
        real = Path(os.path.realpath(raw))
        if not real.is_dir() or real == Path("/"):
            continue
        # Never cover the system itself (a service user whose home is / or /usr/...).
        if any(_strictly_under(Path(s), real) or Path(s) == real for s in _SYSTEM_DIRS):
            continue
        seen.setdefault(real, None)
    return tuple(seen)


def _strictly_under(path: Path, parent: Path) -> bool:
    return parent in path.parents
