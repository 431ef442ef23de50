"""A secret said in conversation is not repeated into the files every later prompt carries."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.sleep.wake import WakeUp
from tests.sleep_support import rig

pytestmark = pytest.mark.anyio

KEY = "sk-ant-api03-Zq8vLx2NcPw7RtYb4HmKd9JsAe6FgUo1"


async def test_the_session_summary_and_wake_letter_mask_secrets(tmp_path: Path) -> None:
    async with rig(tmp_path, phases=lambda t: [WakeUp(t)]) as r:
        await r.say(
            "I'm working on src/kiln/controller.py and we decided to use PID control. "
            f"My password=hunter2 and the key is {KEY}"
        )
        outcome = await r.cycle.run("manual")
        assert outcome.steps["wake_up"]["status"] == "done"
        wake = r.home.wake_file.read_text()
        summaries = [p.read_text() for p in r.home.summaries_dir.glob("*.md")]
        assert summaries and "PID control" in wake
        for text in [wake, *summaries]:
            assert "hunter2" not in text and KEY not in text
        assert "[redacted:" in wake
