"""The real daemon on a model API's bad days: a stream that is not JSON, a stream dropped after
the first delta, a stream that stalls past the turn timeout. Each time the daemon stays up,
the person is told the message is kept, and the message is answered exactly once when the
API answers again."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import DaemonProcess, daemon_env, run_cli, wait_until


def _start(tmp_path: Path, fake: FakeAnthropic, extra: str = "") -> DaemonProcess:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        f"""
[providers.anthropic]
max_retries = 0
timeout_s = 30

[agent]
unavailable_retry_s = 0.5
unavailable_retry_max_s = 0.5
{extra}
"""
    )
    env = daemon_env({"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
    return DaemonProcess(home=home, env=env).start()


def _turn_ends(home: Path) -> list[dict[str, object]]:
    out = []
    for path in sorted((home / "sessions" / "trunk").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "turn_end":
                out.append(rec)
    return out


def _answered(home: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rec in _turn_ends(home):
        if rec.get("status") == "answered":
            key = str(rec["turn_id"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def _inbox_pending(home: Path) -> set[str]:
    pending: dict[str, bool] = {}
    for line in (home / "inbox.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("op") == "put":
            pending[rec["id"]] = True
        elif rec.get("op") == "done":
            pending.pop(rec["id"], None)
    return set(pending)


@pytest.mark.parametrize(
    ("plan", "what"),
    [
        (Planned.malformed(after_deltas=0), "an event that is not JSON before any text"),
        (Planned.malformed(after_deltas=1), "an event that is not JSON after the first delta"),
        (Planned.dropped(after_deltas=1), "a connection dropped after the first delta"),
    ],
    ids=["malformed-first", "malformed-after-delta", "dropped-after-delta"],
)
def test_a_broken_stream_keeps_the_daemon_up_and_the_message_is_answered_once(
    tmp_path: Path, plan: Planned, what: str
) -> None:
    with FakeAnthropic() as fake:
        d = _start(tmp_path, fake)
        try:
            fake.enqueue(plan)
            sent = run_cli("--home", str(d.home), "chat", "-m", "water the ferns", env=d.env)
            assert d.proc is not None and d.proc.poll() is None, f"{what}: daemon died\n{d.logs()}"
            # The person hears the message is kept, not that it failed.
            assert sent.returncode == 1, (sent.stdout, sent.stderr)
            assert "model_unavailable" in sent.stderr and "saved" in sent.stderr, sent.stderr
            wait_until(
                lambda: _answered(d.home) and not _inbox_pending(d.home),
                20,
                f"{what}: the kept message answered",
            )
            assert list(_answered(d.home).values()) == [1]
            assert not _inbox_pending(d.home)
            assert not [e for e in _turn_ends(d.home) if e.get("status") == "failed"]
            # Still up and answering.
            again = run_cli("--home", str(d.home), "chat", "-m", "and the kiln?", env=d.env)
            assert again.returncode == 0, (again.stdout, again.stderr)
            assert "Echo: and the kiln?" in again.stdout
            events = d.log_events()
            assert any(e.get("event") == "turn kept for a retry" for e in events), d.logs()
        finally:
            d.stop()


def test_a_hung_api_past_the_turn_timeout_keeps_the_message_until_it_answers(
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        d = _start(tmp_path, fake, extra="turn_timeout_s = 2")
        try:
            fake.enqueue(Planned.stalled(after_deltas=1))
            sent = run_cli(
                "--home", str(d.home), "chat", "-m", "call the plumber", env=d.env, timeout=30
            )
            assert sent.returncode == 1, (sent.stdout, sent.stderr)
            assert "saved" in sent.stderr, sent.stderr
            wait_until(
                lambda: _answered(d.home) and not _inbox_pending(d.home),
                20,
                "the kept message answered",
            )
            assert list(_answered(d.home).values()) == [1]
            assert not _inbox_pending(d.home)
            assert d.proc is not None and d.proc.poll() is None
        finally:
            d.stop()


def test_a_stream_that_is_not_json_at_start_up_does_not_crash_loop(tmp_path: Path) -> None:
    """A message left pending across a restart meets the same garbage: the daemon stays up."""
    with FakeAnthropic() as fake:
        fake.outage(Planned.malformed(after_deltas=0))
        d = _start(tmp_path, fake)
        try:
            sent = run_cli("--home", str(d.home), "chat", "-m", "the ledger", env=d.env)
            assert sent.returncode == 1, sent.stderr
            d.stop()
            d.start()
            wait_until(lambda: len(fake.message_requests) >= 3, 20, "retries after the restart")
            assert d.proc is not None and d.proc.poll() is None, d.logs()
            status = run_cli("--home", str(d.home), "status", "--json", env=d.env)
            assert status.returncode == 0, status.stderr
            fake.outage(None)
            wait_until(
                lambda: _answered(d.home) and not _inbox_pending(d.home),
                20,
                "answered once the API heals",
            )
            assert list(_answered(d.home).values()) == [1]
        finally:
            d.stop()


def _mount_small_tmpfs(path: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem to fill needs root")
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def _fill(path: Path) -> Path:
    """Write until the filesystem is full; return the filler (delete it to free the space)."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_keeps_the_daemon_up_refuses_new_work_and_answers_the_kept_message(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    _mount_small_tmpfs(home, "16m")
    try:
        with FakeAnthropic() as fake:
            (home / "reverie.toml").write_text(
                "[providers.anthropic]\nmax_retries = 0\n\n"
                "[agent]\nunavailable_retry_s = 0.5\nunavailable_retry_max_s = 0.5\n"
            )
            env = daemon_env(
                {"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url}
            )
            d = DaemonProcess(home=home, env=env).start()
            try:
                first = run_cli(
                    "--home", str(home), "chat", "-m", "before the disk filled", env=env
                )
                assert first.returncode == 0, first.stderr
                filler = _fill(home)
                # The inbox line still fits the page its file already has: the message is
                # acknowledged, then the turn's own writes meet the full disk.
                kept = run_cli("--home", str(home), "chat", "-m", "call the plumber", env=env)
                assert d.proc is not None and d.proc.poll() is None, d.logs()
                assert kept.returncode == 1, (kept.stdout, kept.stderr)
                assert "storage" in kept.stderr, kept.stderr
                assert "saved" in kept.stderr and "space is back" in kept.stderr, kept.stderr
                refused = run_cli("--home", str(home), "chat", "-m", "and the kiln", env=env)
                assert refused.returncode == 1, refused.stderr
                assert "NOT saved" in refused.stderr, refused.stderr
                status = run_cli("--home", str(home), "status", "--json", env=env)
                assert status.returncode == 0, status.stderr
                trunk = json.loads(status.stdout)["trunk"]
                assert trunk["storage_down"] is not None and trunk["queued"] == 1, trunk
                assert d.proc.poll() is None, d.logs()
                # Stopped and started again while still full: one clear line, a temporary
                # failure's exit code (systemd starts it again), and nothing lost.
                assert d.stop() == 0, d.logs()
                with pytest.raises(AssertionError, match=r"exited early \(75\)"):
                    d.start(timeout=20)
                said = [line for line in d.logs().splitlines() if line.startswith("reverie:")]
                assert len(said) == 1 and "refuses writes" in said[0], d.logs()
                assert "Traceback" not in d.logs().split(said[0])[-1]
                filler.unlink()
                d.start()
                wait_until(
                    lambda: len(_answered(home)) >= 2 and not _inbox_pending(home),
                    20,
                    "the kept message answered",
                )
                answered = _answered(home)
                assert sorted(answered.values()) == [1, 1], answered
                assert not _inbox_pending(home)
                again = run_cli("--home", str(home), "chat", "-m", "space is back", env=env)
                assert again.returncode == 0, again.stderr
                assert "Echo: space is back" in again.stdout
            finally:
                d.stop()
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_a_turn_that_fails_says_so_in_the_log(tmp_path: Path) -> None:
    """A rejected request fails the turn (retrying cannot fix it), with its own log line."""
    with FakeAnthropic() as fake:
        d = _start(tmp_path, fake)
        try:
            fake.enqueue(Planned.error(400, "prompt is malformed"))
            sent = run_cli("--home", str(d.home), "chat", "-m", "the kiln", env=d.env)
            assert sent.returncode == 1 and "model_error" in sent.stderr, sent.stderr
            failed = [e for e in d.log_events() if e.get("event") == "turn failed"]
            assert [e.get("code") for e in failed] == ["model_error"], d.logs()
            assert "prompt is malformed" in str(failed[0].get("error"))
        finally:
            d.stop()
