"""`reverie dreams` and `reverie remember --restore` through real subprocesses, on homes that slept."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.revisions import revision_id
from tests.harness import REPO, DaemonProcess, daemon_env
from tests.sleep_phase_support import START, sleep_home


def reverie(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--home", str(home), *args],
        cwd=REPO, env=daemon_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


async def dreamt(root: Path) -> tuple[Path, str]:
    """A home where one dream revised the cooking addendum; returns (home, original cooking.md)."""
    home = root / "home"
    with anyio.fail_after(60):
        async with sleep_home(home) as rig:
            original = (rig.home.topics_dir / "cooking.md").read_text()
            await rig.add_session(
                "bake", [("user", "My sourdough is flat."), ("assistant", "We decided to proof the sourdough overnight.")],
                started=START,
            )  # fmt: skip
            rig.clock.advance(days=1)
            await DreamsPhase().run(
                rig.context(since=START - timedelta(hours=1), cycle_id="night-1")
            )
    return home, original


@pytest.fixture
def home_with_dream(tmp_path: Path) -> tuple[Path, str]:
    return anyio.run(dreamt, tmp_path)


def test_dreams_lists_shows_and_reverts_once(home_with_dream: tuple[Path, str]) -> None:
    home, original = home_with_dream
    rid = revision_id("night-1", "addendum", "cooking")
    cooking = home / "topics" / "cooking.md"
    assert "proof the sourdough overnight" in cooking.read_text()

    listed = reverie(home, "dreams", "--json")
    assert listed.returncode == 0, listed.stderr
    [rev] = json.loads(listed.stdout)
    assert rev["id"] == rid and rev["status"] == "applied" and rev["files"] == ["topics/cooking.md"]
    assert "+- We decided to proof the sourdough overnight." in rev["diff"]

    text = reverie(home, "dreams")
    assert (
        text.returncode == 0
        and text.stdout.startswith(f"{rid}  2026-01-06")
        and "applied" in text.stdout
    )

    shown = reverie(home, "dreams", "show", rid)
    assert shown.returncode == 0 and "+++ b/topics/cooking.md" in shown.stdout

    reverted = reverie(home, "dreams", "revert", rid)
    assert reverted.returncode == 0, reverted.stderr
    assert (
        reverted.stdout.strip()
        == f"reverted {rid}: topics/cooking.md restored to the version before the dream"
    )
    assert cooking.read_text() == original
    assert json.loads(reverie(home, "dreams", "--json").stdout)[0]["status"] == "reverted"

    twice = reverie(home, "dreams", "revert", rid)
    assert twice.returncode == 1 and twice.stdout == ""
    assert twice.stderr.startswith(f"reverie: {rid} was already reverted at ")
    assert cooking.read_text() == original

    unknown = reverie(home, "dreams", "revert", "d-ffffffff")
    assert unknown.returncode == 1
    assert (
        unknown.stderr.strip()
        == "reverie: no dream revision 'd-ffffffff'; `reverie dreams` lists them"
    )


def test_a_fresh_home_has_no_dreams(tmp_path: Path) -> None:
    out = reverie(tmp_path / "new", "dreams")
    assert out.returncode == 0 and out.stdout.strip() == "(no dream revisions yet)"
    assert json.loads(reverie(tmp_path / "new", "dreams", "--json").stdout) == []


def test_revert_while_the_daemon_runs(home_with_dream: tuple[Path, str]) -> None:
    home, original = home_with_dream
    rid = revision_id("night-1", "addendum", "cooking")
    daemon = DaemonProcess(home=home, env=daemon_env())
    daemon.start()
    try:
        reverted = reverie(home, "dreams", "revert", rid)
        assert reverted.returncode == 0, reverted.stderr
        assert (home / "topics" / "cooking.md").read_text() == original
        status = reverie(home, "status", "--json")
        assert status.returncode == 0, status.stderr
    finally:
        assert daemon.stop() == 0
    assert json.loads(reverie(home, "dreams", "--json").stdout)[0]["status"] == "reverted"


async def retired(root: Path) -> Path:
    """A home where maintenance retired a passed plan as stale."""
    home = root / "home"
    with anyio.fail_after(60):
        async with sleep_home(home) as rig:
            await rig.memory.remember("dentist appointment tomorrow")
            rig.clock.advance(days=30)
            report = await MaintenancePhase().run(rig.context())
            assert [r["id"] for r in report.details["retired"]] == ["fact:1"]
    return home


def test_remember_restore_undoes_a_stale_retirement(tmp_path: Path) -> None:
    home = anyio.run(retired, tmp_path)
    memory_md = home / "memory" / "MEMORY.md"
    assert "dentist" not in memory_md.read_text()
    restored = reverie(home, "remember", "--restore", "fact:1")
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.strip() == "fact:1 restored: dentist appointment tomorrow (2026-01-06)"
    assert "dentist appointment tomorrow (2026-01-06)" in memory_md.read_text()
    again = reverie(home, "remember", "--restore", "fact:1")
    assert (
        again.returncode == 1
        and again.stderr.strip() == "reverie: fact:1 is not retracted; nothing to restore"
    )
    both = reverie(home, "remember", "--restore", "fact:1", "some text")
    assert both.returncode != 0 and "--restore takes no TEXT" in both.stderr
