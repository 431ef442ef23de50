"""A home the commands cannot use as they expect: one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import run_cli


def _one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --- a read-only home -----------------------------------------------------------------


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def read_only_home(tmp_path: Path) -> Iterator[Path]:
    """A home holding a database, seen through a read-only bind mount (root ignores mode bits)."""
    source = tmp_path / "source"
    home = source / "home"
    assert run_cli("init", str(home)).returncode == 0
    made = run_cli("remember", "the garden gate sticks", "--home", str(home))
    assert made.returncode == 0, made.stderr
    assert (home / "reverie.db").exists()
    view = tmp_path / "view"
    view.mkdir()
    if os.geteuid() != 0 or _mount("--bind", str(source), str(view)).returncode != 0:
        pytest.skip("a read-only bind mount needs root and mount(8)")
    try:
        remount = _mount("-o", "remount,ro,bind", str(view))
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.strip()}")
        yield view / "home"
    finally:
        subprocess.run(["umount", str(view)], capture_output=True, timeout=30)


def test_run_in_a_read_only_home_is_one_line(read_only_home: Path) -> None:
    result = run_cli("run", "--home", str(read_only_home), timeout=30)
    assert result.returncode == 1
    line = _one_line(result.stderr)
    assert "read-only" in line and str(read_only_home) in line


@pytest.mark.parametrize("flags", [(), ("--json",)])
def test_status_in_a_read_only_home_is_one_line(
    read_only_home: Path, flags: tuple[str, ...]
) -> None:
    result = run_cli("status", "--home", str(read_only_home), *flags, timeout=30)
    assert result.returncode == 1
    assert result.stdout == ""
    line = _one_line(result.stderr)
    assert "reverie.db" in line and "read-only" in line


def test_a_command_without_its_own_check_is_one_line_too(read_only_home: Path) -> None:
    # `dreams` opens the store on its own: the command line's safety net answers for it.
    result = run_cli("dreams", "--home", str(read_only_home), timeout=30)
    assert result.returncode == 1
    assert "read-only" in _one_line(result.stderr)


# --- a dangling persona symlink -------------------------------------------------------


@pytest.mark.parametrize("target", ["missing-dir/SOUL.md", "SOUL-elsewhere.md"])
def test_a_dangling_persona_symlink_is_named_and_never_written_through(
    tmp_path: Path, target: str
) -> None:
    home = tmp_path / "home"
    assert run_cli("init", str(home)).returncode == 0
    soul = home / "persona" / "SOUL.md"
    soul.unlink()
    pointed = tmp_path / target
    soul.symlink_to(pointed)

    result = run_cli("run", "--home", str(home), timeout=30)
    assert result.returncode == 2
    line = _one_line(result.stderr)
    assert str(soul) in line and str(pointed) in line and "does not exist" in line

    # Commands that only read keep working, and none of them wrote a file at the link's target.
    status = run_cli("status", "--home", str(home), "--json", timeout=30)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["running"] is False
    doctor = run_cli("doctor", "--home", str(home), "--json", timeout=60)
    persona = next(c for c in json.loads(doctor.stdout) if c["name"] == "persona")
    assert persona["status"] == "fail" and "SOUL.md is a symlink" in persona["detail"]
    assert soul.is_symlink() and not pointed.exists()
