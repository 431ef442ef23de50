"""Every command finds the daemon the same way — also one whose socket is in its unit's
runtime directory, which a shell does not see — and the daemon says in one plain line that it
is ready and how to chat (issue 33)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.harness import REPO, DaemonProcess, daemon_env, run_cli

START_HINT = "start it with `reverie run` (or `./scripts/run-daemon.sh` in a checkout)"


class RuntimeDirDaemon(DaemonProcess):
    """The daemon as `systemd/reverie.service` runs it: its socket in `$RUNTIME_DIRECTORY`."""

    runtime: Path

    @property
    def socket_path(self) -> Path:
        return self.runtime / "reverie.sock"


def _shell_env(**extra: str) -> dict[str, str]:
    """A shell's environment: no `$RUNTIME_DIRECTORY` (systemd gives it to the service only)."""
    env = {
        k: v for k, v in daemon_env().items() if k not in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR")
    }
    env.update(extra)
    return env


def test_status_doctor_sleep_and_chat_reach_a_daemon_in_a_runtime_directory(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    xdg = tmp_path / "xdg"
    runtime = xdg / "reverie"  # where the user unit's RuntimeDirectory=reverie puts it
    runtime.mkdir(parents=True, mode=0o700)
    d = RuntimeDirDaemon(home=home, env=daemon_env({"RUNTIME_DIRECTORY": str(runtime)}))
    d.runtime = runtime
    d.start()
    try:
        sock = runtime / "reverie.sock"
        assert not (home / "run" / "reverie.sock").exists()
        shell = _shell_env()

        # The home names its daemon's socket: found with --home alone.
        status = run_cli("status", "--home", str(home), "--json", env=shell)
        assert status.returncode == 0, status.stderr
        data = json.loads(status.stdout)
        assert data["running"] is True and data["state"] == "awake", data
        assert "reverie:" not in status.stderr  # its own daemon: nothing to remark on

        doctor = run_cli("doctor", "--home", str(home), "--json", env=shell)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)}
        assert checks["socket"]["status"] == "ok", checks["socket"]
        assert checks["socket"]["detail"].startswith(f"daemon listening on {sock}")

        chat = run_cli("chat", "--home", str(home), "-m", "hello", env=shell)
        assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr

        # A forwarded memory command goes to the same daemon (it answers warm, over the socket).
        remembered = run_cli(
            "remember", "--home", str(home), "the shed key is under the blue pot", env=shell
        )
        assert remembered.returncode == 0, remembered.stderr
        assert any(e.get("event") == "fact remembered" for e in d.log_events())  # by the daemon

        # Another home with no daemon of its own, from a shell that sees the user's runtime
        # directory: the shipped unit's socket, said so, for status as for chat.
        other = tmp_path / "other"
        unit = _shell_env(XDG_RUNTIME_DIR=str(xdg))
        status = run_cli("status", "--home", str(other), "--json", env=unit)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["running"] is True
        assert f"using the systemd unit's {sock}" in status.stderr
        slept = run_cli("sleep", "--home", str(other), env=unit)
        assert slept.returncode == 0 and "sleep cycle" in slept.stdout, slept.stderr
    finally:
        assert d.stop() == 0

    # The daemon said once, in words, that it was ready and how to chat; every other line of
    # its output is a JSON log line.
    assert d.log_path is not None
    lines = [ln for ln in d.log_path.read_text().splitlines() if ln.strip()]
    ready = [ln for ln in lines if not ln.startswith("{")]
    assert ready == [f"reverie: ready — socket {sock}; chat with `reverie chat --home {home}`"], (
        ready
    )
    assert all(json.loads(ln) for ln in lines if ln.startswith("{"))

    # Stopped: the home no longer names a socket, status says so, and how to start it, both ways.
    assert (home / "reverie.lock").read_text().splitlines()[1:] == []
    status = run_cli("status", "--home", str(home), env=_shell_env())
    assert status.returncode == 0
    assert f"daemon:       not running; {START_HINT}" in status.stdout
    chat = run_cli("chat", "--home", str(home), "-m", "hello", env=_shell_env())
    assert chat.returncode == 1
    assert chat.stderr.strip().endswith(START_HINT), chat.stderr


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    from importlib.metadata import version

    assert done.returncode == 0, done.stderr
    assert done.stdout == f"reverie {version('reverie')}\n"
    assert done.stderr == ""
