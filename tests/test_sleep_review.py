"""Three sleep-cycle defects found by a review: a message during wind-down, deferred phases'
material, and idle cycles' journal notes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from structlog.testing import capture_logs

from daemon.agent.turns import TurnDone
from daemon.events import JournalNote, SleepStarted
from daemon.models.base import ModelRequest
from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.phases import PhaseContext, PhaseReport
from daemon.sleep.wake import WakeUp
from daemon.testing import Reply, ScriptedModel
from tests.sleep_support import rig, transcript_records, wait_until

pytestmark = pytest.mark.anyio


class Seeing:
    """An optional phase that records the `since` it was given; it can wait on an event."""

    def __init__(self, name: str, *, block: anyio.Event | None = None) -> None:
        self.name = name
        self.optional = True
        self.block = block
        self.started: list[str] = []
        self.since: list[datetime | None] = []

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        self.started.append(ctx.cycle_id)
        if self.block is not None:
            await self.block.wait()
        self.since.append(ctx.since)
        return PhaseReport(phase=self.name, changed=f"{self.name} ran")


@contextmanager
def info_logs() -> Iterator[list[dict[str, Any]]]:
    """Capture the log events at info level (an earlier test may have configured a higher one)."""
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logs:
            yield logs
    finally:
        structlog.configure(**before)


def trunk_model() -> ScriptedModel:
    def script(req: ModelRequest) -> Reply:
        text = req.messages[-1].text
        # The wind-down message is slow, so the hold is asked for while its turn is running.
        return Reply(text=f"noted: {text[:60]}", wait_s=0.3 if "awake" in text else 0.0)

    return ScriptedModel(script=script)


async def test_a_message_during_wind_down_is_answered_before_sleeping_and_does_not_wake_early(
    tmp_path: Path,
) -> None:
    dreaming = Seeing("dreams")
    model = trunk_model()
    async with rig(
        tmp_path / "home", models={"trunk": model}, phases=lambda t: [dreaming, WakeUp(t)]
    ) as r:
        await r.say("We decided to bake sourdough on Sundays.")
        old = r.trunk.session.id  # type: ignore[union-attr]

        async def message_now(_: SleepStarted) -> None:
            # The message comes after the cycle started and its turn is running before the
            # cycle asks for the hold: the wind-down window of the review's repro.
            turn = await r.say("are you awake?", wait=False)
            turns.append(turn)
            await wait_until(lambda: len(model.calls) == 2, "the message's turn running")

        turns: list[str] = []
        r.bus.on(SleepStarted, message_now, name="test.message_during_wind_down")
        with anyio.fail_after(30):
            outcome = await r.cycle.run("manual")
        reply = await r.answered(turns[0])
        assert isinstance(reply, TurnDone)
        # Answered before sleeping, in the old session, and the sleep was not cut short.
        answered = [
            x["_file"]
            for x in transcript_records(r.home)
            if x.get("type") == "turn_end" and x.get("turn_id") == turns[0]
        ]
        assert answered == [old]
        assert not outcome.woke_early and outcome.deferred == []
        assert outcome.steps["dreams"]["status"] == "done" and dreaming.started == [
            outcome.cycle_id
        ]
        assert r.changes[-1].detail == "rested"
        # The woken session starts from a letter that includes the message's day.
        assert outcome.new_session_id and outcome.new_session_id != old


async def test_a_message_waiting_in_the_held_inbox_still_wakes_early(tmp_path: Path) -> None:
    dreaming = Seeing("dreams", block=anyio.Event())
    async with rig(
        tmp_path / "home", models={"trunk": trunk_model()}, phases=lambda t: [dreaming, WakeUp(t)]
    ) as r:
        await r.say("We decided to bake sourdough on Sundays.")
        record = await r.cycle.start("manual")
        await wait_until(lambda: bool(dreaming.started), "dreams running")
        turn = await r.say("sorry, one more thing", wait=False)
        reply = await r.answered(turn)
        assert isinstance(reply, TurnDone)
        outcome = await r.cycle.wait(record.id)
        assert outcome.woke_early and outcome.deferred == ["dreams"]
        assert "woke early" in r.changes[-1].detail


async def test_a_deferred_phase_reaches_back_to_the_last_cycle_in_which_it_completed(
    tmp_path: Path,
) -> None:
    dreaming = Seeing("dreams")
    async with rig(
        tmp_path / "home", models={"trunk": trunk_model()}, phases=lambda t: [dreaming, WakeUp(t)]
    ) as r:
        await r.say("We decided to bake sourdough on Sundays.")
        first = await r.cycle.run("nightly")
        assert first.steps["dreams"]["status"] == "done" and dreaming.since == [None]
        rows = await r.rows("SELECT finished_at FROM sleep_cycles WHERE id = ?", (first.cycle_id,))
        first_end = datetime.fromisoformat(rows[0][0])

        # The second night is woken early: dreams are deferred.
        r.clock.advance(hours=24)
        await r.say("The starter lives in the blue jar.")
        dreaming.block = anyio.Event()
        record = await r.cycle.start("nightly")
        await wait_until(lambda: len(dreaming.started) == 2, "dreams running")
        await r.say("one more thing before you sleep", wait=False)
        second = await r.cycle.wait(record.id)
        assert second.deferred == ["dreams"]

        # The third night's dreams reach back to the end of the first cycle, not the second.
        dreaming.block = None
        r.clock.advance(hours=24)
        third = await r.cycle.run("nightly")
        assert third.steps["dreams"]["status"] == "done"
        assert dreaming.since[-1] == first_end

        # Once completed, the next night starts from there.
        r.clock.advance(hours=24)
        await r.cycle.run("nightly")
        rows = await r.rows("SELECT finished_at FROM sleep_cycles WHERE id = ?", (third.cycle_id,))
        assert dreaming.since[-1] == datetime.fromisoformat(rows[0][0])


async def test_deferred_dreams_dream_over_what_was_said_before_the_early_woken_cycle(
    tmp_path: Path,
) -> None:
    def dream_script(req: ModelRequest) -> Reply:
        return Reply(text="## Entry\nA quiet reflection on bread.\n")

    dreams_model = ScriptedModel(script=dream_script)
    async with rig(
        tmp_path / "home",
        models={"trunk": trunk_model(), "dreams": dreams_model},
        phases=lambda t: [DreamsPhase(), WakeUp(t)],
    ) as r:
        await r.say("We decided to bake sourdough on Sundays.")
        await r.cycle.run("nightly")
        r.clock.advance(hours=24)
        await r.say("The starter lives in the blue jar, fed every morning.")
        await r.memory.remember("the sourdough starter is called Clint")
        # The night takes an hour after the day was summarised (a real night takes time).
        advance = [True]

        def an_hour_passes(note: JournalNote) -> None:
            if "wind_down" in note.tags and advance:
                advance.clear()
                r.clock.advance(hours=1)

        r.bus.on(JournalNote, an_hour_passes, name="test.an_hour_passes")
        # A message waits in the held inbox: the cycle wakes early and defers the dreams.
        await r.trunk.hold()
        try:
            await r.say("good night", wait=False)
            second = await r.cycle.run("nightly")
        finally:
            r.trunk.release()
        assert second.deferred == ["dreams"] and second.woke_early and not advance
        r.clock.advance(hours=24)
        calls = len(dreams_model.calls)
        third = await r.cycle.run("nightly")
        assert third.steps["dreams"]["status"] == "done"
        dreams = [req for req in dreams_model.calls[calls:] if req.task == "dream"]
        dreamed = "\n".join(m.text for req in dreams for m in req.messages)
        assert "blue jar" in dreamed and "called Clint" in dreamed


async def test_idle_cycles_write_log_lines_but_no_journal_notes(tmp_path: Path) -> None:
    async with rig(
        tmp_path / "home",
        models={"trunk": trunk_model()},
        phases=lambda t: [MaintenancePhase(), DreamsPhase(), WakeUp(t)],
    ) as r:
        with info_logs() as logs:
            for _ in range(3):
                outcome = await r.cycle.run("nightly")
                assert all(s["status"] == "done" for s in outcome.steps.values())
                r.clock.advance(hours=24)
        assert [n.summary for n in r.notes() if "sleep" in n.tags] == []
        finished = [e["phase"] for e in logs if e.get("event") == "sleep phase finished"]
        assert finished == ["wind_down", "maintenance", "dreams", "wake_up"] * 3

        # A night after a conversation has something to say for the steps that changed things.
        await r.say("We decided to bake sourdough on Sundays.")
        await r.cycle.run("nightly")
        noted = [n.tags[1] for n in r.notes() if "sleep" in n.tags]
        assert "wind_down" in noted and "wake_up" in noted and "maintenance" not in noted
