"""Facts said in passing, through the real daemon and the offline model: chat, sleep, change, see."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.harness import Client, DaemonProcess, daemon_env, run_cli


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--home", str(home), timeout=120)


def test_a_fact_said_in_passing_is_mined_at_night_and_its_change_shown_after(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("Could you draft the agenda? The team offsite is in Bergen this year.")
            c.chat("Also, my partner Sam will join the dinner.")
        first = _cli(home, "sleep", "--wait")
        assert first.returncode == 0, first.stderr
        assert "mining" in first.stdout
        facts = json.loads(_cli(home, "memory", "facts", "--json").stdout)
        by_value = {f["value"]: f for f in facts if f["source"] == "mined"}
        assert by_value["Bergen"]["origin"] == "person" and by_value["Sam"]["origin"] == "person"
        bergen = by_value["Bergen"]
        assert bergen["session"] and bergen["message_ids"]
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("Change of plan: the offsite moves from Bergen to Kotor.")
        second = _cli(home, "sleep", "--wait")
        assert second.returncode == 0, second.stderr
        history = _cli(home, "memory", "facts", "--history", bergen["id"])
        assert history.returncode == 0, history.stderr
        assert "The team offsite is in Bergen this year" in history.stdout
        assert "changed: superseded by" in history.stdout and "Kotor" in history.stdout
        shown = _cli(home, "context", "--prompt", "where is the offsite again?", "--text")
        assert shown.returncode == 0, shown.stderr
        assert "(changed from Bergen on " in shown.stdout
        assert f'id="{bergen["id"]}"' not in shown.stdout  # the old value never stands alone
    finally:
        assert d.stop() == 0
