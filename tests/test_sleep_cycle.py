"""The sleep cycle in-process: phases in order, checkpoints and resume, retries, early wake,
wind-down, the spend cap, the nightly schedule and the offline WAKE.md."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import pytest

from daemon.agent.inbox import Inbox
from daemon.agent.turns import TurnDone
from daemon.clock import FakeClock
from daemon.lifecycle import DaemonState
from daemon.models.base import Message, ModelRequest, Usage
from daemon.models.offline_sleep import weave_wake
from daemon.settings import (
    JournalSettings,
    SchedulerSettings,
    Settings,
    SleepSettings,
    SpendSettings,
    StoreSettings,
)
from daemon.sleep.phases import PhaseContext, PhaseReport
from daemon.sleep.wake import WakeUp, wake_prompt
from daemon.testing import Reply, ScriptedModel
from daemon.tokens import count_tokens
from tests.sleep_support import START, rig, sleep_settings, transcript_records, wait_until

pytestmark = pytest.mark.anyio

LETTER = "# Wake-up notes\n\n## Where things stand\n- We settled on Porto for May; Ada in Lisbon is the open thread.\n"


class Recording:
    """A phase that records each run; it can fail a number of times, or wait on an event."""

    def __init__(
        self,
        name: str,
        *,
        optional: bool = False,
        fail_times: int = 0,
        block: anyio.Event | None = None,
        calls_model: bool = False,
    ) -> None:
        self.name = name
        self.calls_model = calls_model
        self.optional = optional
        self.fail_times = fail_times
        self.block = block
        self.runs: list[str] = []
        self.finished: list[str] = []

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        self.runs.append(ctx.cycle_id)
        if self.calls_model:
            request = ctx.models.request("dreams", messages=[Message.user("reflect")], task="dream")
            await ctx.models.complete(request)
        if self.fail_times > 0:
            self.fail_times -= 1
            raise RuntimeError(f"{self.name} hiccup")
        if self.block is not None:
            await self.block.wait()
        self.finished.append(ctx.cycle_id)
        return PhaseReport(
            phase=self.name, changed=f"{self.name} ran", details={"earlier": sorted(ctx.earlier)}
        )


def echo_trunk() -> ScriptedModel:
    return ScriptedModel(script=lambda req: Reply(text=f"noted: {req.messages[-1].text[:60]}"))


def system_text(request: ModelRequest) -> str:
    return "\n".join(b.text for b in request.system)


async def test_a_cycle_winds_down_weaves_wake_md_and_wakes_into_a_fresh_session(
    tmp_path: Path,
) -> None:
    trunk = echo_trunk()
    dreams = ScriptedModel(script=[LETTER])
    async with rig(tmp_path / "home", models={"trunk": trunk, "dreams": dreams}) as r:
        await r.memory.remember("my sister Ada lives in Lisbon", origin="person")
        await r.say("we settled on Porto for the May trip")
        old = r.trunk.session.id  # type: ignore[union-attr]
        outcome = await r.cycle.run("manual")
        new = r.trunk.session.id  # type: ignore[union-attr]
        assert outcome.old_session_id == old and outcome.new_session_id == new != old
        assert {k: v["status"] for k, v in outcome.steps.items()} == {
            "wind_down": "done",
            "wake_up": "done",
        }
        assert r.home.wake_file.read_text() == LETTER
        # The weave saw the day and the remembered fact, in the wake format, on the dreams role.
        (weave,) = dreams.calls
        assert weave.task == "wake" and weave.role == "dreams"
        prompt = weave.messages[-1].text
        assert (
            "Porto for the May trip" in prompt
            and "Ada lives in Lisbon" in prompt
            and prompt.startswith("DATE:")
        )
        assert [(c.previous.value, c.state.value) for c in r.changes[1:]] == [
            ("awake", "winding-down"),
            ("winding-down", "asleep"),
            ("asleep", "awake"),
        ]
        assert r.changes[-1].detail == "rested" and r.lifecycle.phase is None and not r.trunk.held
        kinds = [type(e).__name__ for e in r.events]
        assert kinds == ["SleepStarted", "JournalNote", "JournalNote", "SleepFinished", "Woke"]
        assert [n.tags for n in r.notes()] == [("sleep", "wind_down"), ("sleep", "wake_up")]
        assert (
            "WAKE.md rewoven" in r.notes()[1].summary
            and str(r.home.wake_file) in r.notes()[1].files_touched
        )
        assert r.of(type(r.events[-1]))[0].session_id == new
        assert await r.rows(
            "SELECT previous_id, switch_reason FROM sessions WHERE id = ?", (new,)
        ) == [(old, "sleep")]
        phases = await r.rows("SELECT phase, status, attempts FROM sleep_phases ORDER BY seq")
        assert phases == [("wind_down", "done", 1), ("wake_up", "done", 1)]
        # The first turn of the new session is told it woke up; the second is not.
        await r.say("good morning")
        first = system_text(trunk.calls[-1])
        assert "You have just woken up" in first and "Porto for May" in first
        await r.say("what next?")
        assert "You have just woken up" not in system_text(trunk.calls[-1])
        # The old session was summarised before the switch.
        assert (
            await r.rows("SELECT summary_path IS NOT NULL FROM sessions WHERE id = ?", (old,))
        ) == [(1,)]


async def test_a_failing_phase_is_retried_with_backoff_then_skipped_while_the_rest_proceeds(
    tmp_path: Path,
) -> None:
    flaky = Recording("maintenance", fail_times=2)
    broken = Recording("dreams", optional=True, fail_times=99)
    cfg = sleep_settings(phase_retries=2, retry_base_s=30.0, retry_max_s=600.0)
    async with rig(
        tmp_path / "home", settings=cfg, phases=lambda t: [flaky, broken, WakeUp(t)]
    ) as r:
        await r.say("remember that the boiler service is due in April")
        before = r.clock.now()
        outcome = await r.cycle.run("manual")
        waited = (r.clock.now() - before).total_seconds()
        steps = {k: v["status"] for k, v in outcome.steps.items()}
        assert steps == {
            "wind_down": "done",
            "maintenance": "done",
            "dreams": "skipped",
            "wake_up": "done",
        }
        # Backoff on the injectable clock: 30 s then 60 s for each phase that failed twice or more.
        assert waited == pytest.approx(30 + 60 + 30 + 60)
        assert len(flaky.runs) == 3 and len(broken.runs) == 3 and outcome.new_session_id
        rows = await r.rows("SELECT phase, status, attempts, error FROM sleep_phases ORDER BY seq")
        assert rows[1][:3] == ("maintenance", "done", 3)
        assert rows[2][:3] == ("dreams", "skipped", 3) and "dreams hiccup" in rows[2][3]
        skipped = [n for n in r.notes() if "skipped" in n.tags]
        assert len(skipped) == 1 and "dreams skipped after 3 attempt(s)" in skipped[0].summary
        # Later phases see the earlier reports.
        assert outcome.steps["maintenance"]["report"]["details"]["earlier"] == ["wind_down"]


async def test_an_interrupted_cycle_resumes_at_the_next_phase_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START)
    gate = anyio.Event()
    first = Recording("maintenance")
    second = Recording("dreams", block=gate)
    models = {"trunk": echo_trunk()}
    phases = lambda t: [first, second, WakeUp(t)]  # noqa: E731
    async with rig(tmp_path / "home", clock=clock, models=models, phases=phases) as r:
        await r.say("my dog is called Pepper")
        old = r.trunk.session.id  # type: ignore[union-attr]
        record = await r.cycle.start("nightly")
        await wait_until(lambda: len(second.runs) == 1, "the second phase running")
        assert r.lifecycle.state is DaemonState.ASLEEP and r.lifecycle.phase == "dreams"
        # The daemon stops here, mid-phase.
    home = r.home
    # A message arrives while it is down (accepted by a previous run, still unanswered).
    pending = await Inbox(home.inbox_file, clock).put("are you awake?")
    gate.set()
    async with rig(tmp_path / "home", clock=clock, models=models, phases=phases) as r2:
        await wait_until(lambda: r2.cycle.last is not None, "the resumed cycle")
        outcome = r2.cycle.last
        assert outcome is not None and outcome.cycle_id == record.id
        new = r2.trunk.session.id  # type: ignore[union-attr]
        await wait_until(lambda: not r2.trunk.inbox.pending(), "the waiting message answered")
        rows = await r2.rows(
            "SELECT phase, status, attempts FROM sleep_phases WHERE cycle_id = ? ORDER BY seq",
            (record.id,),
        )
        cycle = await r2.rows(
            "SELECT status, resumed, new_session_id FROM sleep_cycles WHERE id = ?", (record.id,)
        )
        resumed_events = [type(e).__name__ for e in r2.events]
    assert first.runs == [record.id]  # completed before the stop: never run again
    assert second.runs == [record.id, record.id] and second.finished == [record.id]
    assert rows == [
        ("wind_down", "done", 1),
        ("maintenance", "done", 1),
        ("dreams", "done", 2),
        ("wake_up", "done", 1),
    ]
    assert cycle == [("done", 1, new)] and new != old
    # sleep_started is not announced twice for one cycle.
    assert "SleepStarted" not in resumed_events and resumed_events[-2:] == ["SleepFinished", "Woke"]
    # The message that waited is answered exactly once, in the session woken into.
    answered = [
        x
        for x in transcript_records(home)
        if x.get("type") == "turn_end" and x.get("turn_id") == pending.id
    ]
    assert [x["_file"] for x in answered] == [new]


async def test_a_message_during_sleep_wakes_early_defers_optional_phases_and_loses_nothing(
    tmp_path: Path,
) -> None:
    dreaming = Recording("dreams", optional=True, block=anyio.Event())
    later = Recording("reflection", optional=True)
    trunk = echo_trunk()
    async with rig(
        tmp_path / "home", models={"trunk": trunk}, phases=lambda t: [dreaming, later, WakeUp(t)]
    ) as r:
        await r.say("we decided to paint the kitchen green")
        old = r.trunk.session.id  # type: ignore[union-attr]
        record = await r.cycle.start("nightly")
        await wait_until(lambda: bool(dreaming.runs), "dreams running")
        turn = await r.say("sorry, one more thing: are you there?", wait=False)
        reply = await r.answered(turn)
        assert isinstance(reply, TurnDone)
        outcome = r.cycle.last
        assert outcome is not None and outcome.cycle_id == record.id and outcome.woke_early
        assert {k: v["status"] for k, v in outcome.steps.items()} == {
            "wind_down": "done",
            "dreams": "deferred",
            "reflection": "deferred",
            "wake_up": "done",
        }
        assert outcome.deferred == ["dreams", "reflection"] and later.runs == []
        woke = r.changes[-1]
        assert (
            woke.state is DaemonState.AWAKE
            and "woke early" in woke.detail
            and "dreams, reflection" in woke.detail
        )
        # Answered in the new session, told it was woken early.
        new = r.trunk.session.id  # type: ignore[union-attr]
        assert new != old
        answered = [
            x["_file"]
            for x in transcript_records(r.home)
            if x.get("type") == "turn_end" and x.get("turn_id") == turn
        ]
        assert answered == [new]
        assert "woke you early" in system_text(trunk.calls[-1])
        assert next(n.summary for n in r.notes() if "deferred" in n.tags).startswith(
            "sleep · dreams deferred"
        )
        # Deferred phases run at the next sleep.
        dreaming.block = None
        second = await r.cycle.run("manual")
        assert second.steps["dreams"]["status"] == "done" and later.finished == [second.cycle_id]


async def test_wind_down_tells_the_trunk_it_is_tired_and_sleeps_at_the_end_of_the_next_turn(
    tmp_path: Path,
) -> None:
    trunk = echo_trunk()
    # The hard threshold out of reach: how much of the earlier turns memory has indexed by the
    # next turn varies its context, and the soft crossing is what is tested here.
    cfg = sleep_settings(hard_threshold=1.0)
    async with rig(tmp_path / "home", settings=cfg, models={"trunk": trunk}) as r:
        await r.say("hello")
        measured = r.trunk.last_result.context_tokens  # type: ignore[union-attr]
        # Make the window such that the next measure crosses 80%.
        r.trunk.loop.context_window = int(measured / 0.84)
        await r.say("a short one")
        assert (
            r.lifecycle.state is DaemonState.WINDING_DOWN
            and "finishing the current task" in r.lifecycle.detail
        )
        assert "getting tired" not in system_text(trunk.calls[-1]) and r.cycle.running is None
        old = r.trunk.session.id  # type: ignore[union-attr]
        noted = await r.say("and the last thing")
        assert "You are getting tired" in system_text(trunk.calls[-1])
        await wait_until(lambda: r.cycle.last is not None, "the compaction cycle")
        assert r.cycle.last is not None and r.cycle.last.reason == "compaction"
        assert r.trunk.session.id != old and r.lifecycle.state is DaemonState.AWAKE  # type: ignore[union-attr]
        # The noted turn was finished, in the old session, before the cycle began.
        ends = [
            x
            for x in transcript_records(r.home)
            if x.get("type") == "turn_end" and x.get("turn_id") == noted
        ]
        assert [x["_file"] for x in ends] == [old] and ends[0]["status"] == "answered"


async def test_wind_down_starts_anyway_when_the_model_ignores_the_note(tmp_path: Path) -> None:
    # The model never finishes cleanly after the note (it runs out of tokens every time).
    trunk = ScriptedModel(
        script=lambda req: Reply(
            text="still going",
            stop_reason="max_tokens" if "getting tired" in system_text(req) else None,
        )
    )
    # The hard threshold out of reach: what a turn's context holds depends on how much of the
    # earlier turns memory has indexed by then, and only the limit of noted turns is tested here.
    cfg = sleep_settings(wind_down_turns=2, hard_threshold=1.0)
    async with rig(tmp_path / "home", settings=cfg, models={"trunk": trunk}) as r:
        await r.say("hello")
        r.trunk.loop.context_window = int(r.trunk.last_result.context_tokens / 0.84)  # type: ignore[union-attr]
        await r.say("crossing")
        assert r.lifecycle.state is DaemonState.WINDING_DOWN
        await r.say("noted once")
        await anyio.sleep(0.05)
        assert (
            r.cycle.running is None and r.cycle.last is None
        )  # one noted turn, not finished: keep going
        await r.say("noted twice")
        await wait_until(
            lambda: r.cycle.last is not None, "the cycle after the limit of noted turns"
        )
        assert r.cycle.last is not None and r.cycle.last.reason == "compaction"


async def test_over_the_hard_threshold_the_cycle_starts_at_the_end_of_that_turn(
    tmp_path: Path,
) -> None:
    trunk = echo_trunk()
    async with rig(tmp_path / "home", models={"trunk": trunk}) as r:
        await r.say("hello")
        r.trunk.loop.context_window = int(r.trunk.last_result.context_tokens / 0.97)  # type: ignore[union-attr]
        await r.say("way over")
        await wait_until(lambda: r.cycle.last is not None, "the cycle at the hard threshold")
        assert r.cycle.last is not None and r.cycle.last.reason == "compaction"
        assert not any("getting tired" in system_text(c) for c in trunk.calls)


async def test_the_spend_cap_skips_optional_phases_and_wake_up_still_writes_an_extractive_letter(
    tmp_path: Path,
) -> None:
    optional = Recording("dreams", optional=True, calls_model=True)
    dreams = ScriptedModel(script=[LETTER])
    cfg = Settings(
        scheduler=SchedulerSettings(timezone="UTC"), spend=SpendSettings(daily_cap_usd=1.0)
    )
    async with rig(
        tmp_path / "home",
        settings=cfg,
        models={"trunk": echo_trunk(), "dreams": dreams},
        phases=lambda t: [optional, WakeUp(t)],
    ) as r:
        await r.say("my partner's name is Sam and we are going to Porto in May")
        assert r.roles.ledger is not None
        await r.roles.ledger.record(
            role="dreams",
            provider="anthropic",
            model="claude-haiku-4-5",
            usage=Usage(input_tokens=900_000),
        )
        outcome = await r.cycle.run("nightly")
        assert (
            outcome.steps["dreams"]["status"] == "skipped"
            and "spend cap" in outcome.steps["dreams"]["changed"]
        )
        # It was tried once (the cap stopped its model call), not retried, and no call went out.
        assert (
            optional.runs == [outcome.cycle_id] and optional.finished == [] and dreams.calls == []
        )
        assert (
            outcome.steps["wake_up"]["status"] == "done"
            and "model not used" in outcome.steps["wake_up"]["changed"]
        )
        wake = r.home.wake_file.read_text()
        assert "Sam" in wake and "Porto" in wake and "offline model" in wake


async def test_the_nightly_job_runs_at_the_configured_local_time_with_jitter_and_not_twice(
    tmp_path: Path,
) -> None:
    zone = ZoneInfo("Europe/Lisbon")
    clock = FakeClock(START.replace(hour=1))
    cfg = Settings(
        scheduler=SchedulerSettings(timezone="Europe/Lisbon", nightly_sleep="03:30"),
        sleep=SleepSettings(jitter_minutes=20),
        # The daemon's other jobs are scheduled too, a week apart: the fake clock flies through
        # hours of naps, and a heartbeat or checkpoint every few minutes of them costs real ones.
        journal=JournalSettings(heartbeat_minutes=7 * 24 * 60),
        store=StoreSettings(checkpoint_interval_s=7 * 24 * 3600),
    )
    home = tmp_path / "home"
    async with rig(home, settings=cfg, clock=clock, models={"trunk": echo_trunk()}) as r:
        await r.say("a day's talk")
        # The daemon's own scheduler, with every job it runs beside the nightly one.
        s = r.services.scheduler
        planned = s.next_run("nightly_sleep")
        assert planned is not None
        local = planned.astimezone(zone)
        assert (local.hour, local.minute) >= (3, 30) and local - local.replace(
            hour=3, minute=30, second=0, microsecond=0
        ) <= timedelta(minutes=20)
        async with anyio.create_task_group() as tg:
            await tg.start(s.run)
            await wait_until(
                lambda: s.describe()["nightly_sleep"]["last_status"] == "ok", "the nightly run"
            )
            first_result = s.describe()["nightly_sleep"]["last_result"] or ""
            tg.cancel_scope.cancel()
        # (The fake clock runs on while the scheduler naps, so later nights may have run too.)
        cycles = await r.rows("SELECT reason, started_at FROM sleep_cycles ORDER BY started_at")
        assert cycles[0][0] == "nightly" and datetime.fromisoformat(cycles[0][1]) >= planned
        assert "wake_up done" in first_result
        last_run = s.last_run("nightly_sleep")
    # Down for three nights: the next start catches up once, at once.
    assert last_run is not None
    clock.set(last_run + timedelta(days=3, hours=8))
    async with rig(home, settings=cfg, clock=clock, models={"trunk": echo_trunk()}) as r:
        assert r.services.scheduler.next_run("nightly_sleep") == clock.now()
        # Run again within the minimum gap (a catch-up right after a cycle): skipped, no second cycle.
        last = await r.cycle.checkpoints.last_finished()
        assert last is not None and last.finished_at is not None
        clock.set(last.finished_at + timedelta(hours=2))
        before = len(await r.rows("SELECT id FROM sleep_cycles"))
        assert (await r.cycle.nightly()).startswith("skipped")
        assert len(await r.rows("SELECT id FROM sleep_cycles")) == before


async def test_a_second_start_while_asleep_is_refused_with_a_reason(tmp_path: Path) -> None:
    gate = anyio.Event()
    slow = Recording("dreams", block=gate)
    async with rig(
        tmp_path / "home", models={"trunk": echo_trunk()}, phases=lambda t: [slow, WakeUp(t)]
    ) as r:
        from daemon.sleep.cycle import SleepBusy

        shipped_wake = r.home.wake_file.read_text()
        # Two starts at the same moment (the nightly job and a person's `reverie sleep`): one wins.
        outcomes: list[str] = []

        async def try_start(reason: str) -> None:
            try:
                outcomes.append((await r.cycle.start(reason)).reason)
            except SleepBusy:
                outcomes.append("busy")

        async with anyio.create_task_group() as tg:
            tg.start_soon(try_start, "nightly")
            tg.start_soon(try_start, "manual")
        assert sorted(outcomes) == ["busy", "nightly"]
        await wait_until(lambda: bool(slow.runs), "asleep")

        with pytest.raises(SleepBusy, match=r"already running .*phase dreams"):
            await r.cycle.start("manual")
        gate.set()
        await wait_until(lambda: r.cycle.last is not None, "the cycle")
        # Nothing was said: WAKE.md is kept and the session is not switched.
        assert r.cycle.last is not None and r.cycle.last.new_session_id is None
        assert "nothing was said" in r.cycle.last.steps["wake_up"]["changed"]
        assert r.home.wake_file.read_text() == shipped_wake


def test_the_offline_letter_is_extractive_bounded_and_free_of_the_offline_chatter() -> None:
    from daemon.memory.api import MemoryItem

    prompt = wake_prompt(
        date="Monday 2 March 2026, 03:30",
        limit=200,
        summary=(
            "The person: my dog is called Pepper. Reverie: I'm Reverie's built-in offline model, not a language model. "
            "The person: we decided to repaint the kitchen green."
        ),
        decisions=["we decided to repaint the kitchen green", "You said: “something”"],
        memories=[
            MemoryItem(
                id="fact:3", kind="fact", text="my sister Ada lives in Lisbon", origin="person"
            )
        ],
        transcript=[
            "[user] remember that the boiler service is due in April",
            "[assistant] I'm Reverie's built-in offline model. Set ANTHROPIC_API_KEY to talk to a real model.",
            "[user] I work at the harbour museum now. Should we go to Porto in May?",
        ],
    )
    letter = weave_wake(prompt)
    assert letter.startswith("# Wake-up notes") and "Monday 2 March 2026" in letter
    for kept in (
        "Pepper",
        "Ada lives in Lisbon",
        "boiler service is due in April",
        "harbour museum",
        "repaint the kitchen green",
        "Porto in May?",
    ):
        assert kept in letter, kept
    assert (
        "ANTHROPIC_API_KEY" not in letter
        and "You said" not in letter
        and "not a language model" not in letter
    )
    assert (
        letter.count("boiler service") == 1
    )  # the fact and the request to remember it are one line
    assert count_tokens(letter) <= 200
    tight = weave_wake(prompt.replace("LIMIT: 200 tokens", "LIMIT: 90 tokens"))
    assert count_tokens(tight) <= 90 and "## Where things stand" in tight


def test_the_offline_letter_takes_where_things_stand_from_the_narrative_never_its_lists() -> None:
    prompt = wake_prompt(
        date="Monday 2 March 2026, 03:30",
        limit=300,
        summary=(
            "# Kayak and paddle\n\nThe person asked about the kayak and said the paddle is red.\n\n"
            "## Work done\n\n- called remember\n- ran `ls` (exit 0)\n\n## Decisions\n\n- keep the kayak"
        ),
        decisions=[],
        memories=[],
        transcript=["[user] what do you recall about my kayak?"],
    )
    letter = weave_wake(prompt)
    standing = letter.split("## Where things stand", 1)[1].split("\n## ", 1)[0]
    assert "paddle is red" in standing
    for junk in ("Work done", "called remember", "ran `ls`", "# Kayak"):
        assert junk not in letter, junk


async def test_an_idle_night_makes_no_model_call(tmp_path: Path) -> None:
    from daemon.sleep.dreams import DreamsPhase
    from daemon.sleep.maintenance import MaintenancePhase

    def refuse(request: ModelRequest) -> Reply:
        raise AssertionError(f"an idle night called the {request.role} model")

    strict = {
        role: ScriptedModel(script=refuse)
        for role in ("summariser", "dreams", "heartbeat", "trunk")
    }
    async with rig(
        tmp_path / "home",
        models=strict,
        phases=lambda t: [MaintenancePhase(), DreamsPhase(), WakeUp(t)],
    ) as r:
        first = await r.cycle.run("nightly")
        r.clock.advance(hours=24)
        second = await r.cycle.run("nightly")
        assert all(s["status"] == "done" for o in (first, second) for s in o.steps.values())
        assert first.new_session_id is None and second.new_session_id is None
        assert all(not m.calls for m in strict.values())
        assert await r.rows("SELECT COUNT(*) FROM usage_ledger") == [(0,)]


def test_the_offline_letter_says_a_day_was_quiet_only_when_nothing_was_said() -> None:
    chatter = "Reverie: The remember tool returned: remembered as fact:1. Reverie: I am the offline model."
    busy = wake_prompt(
        date="Mon",
        limit=600,
        summary=chatter,
        decisions=[],
        memories=[],
        transcript=["[user] The roof leaks again near the chimney."],
    )
    assert "quiet day" not in weave_wake(busy) and "roof leaks again" in weave_wake(busy)
    quiet = wake_prompt(date="Mon", limit=600, summary="", decisions=[], memories=[], transcript=[])
    assert "A quiet day" in weave_wake(quiet)


async def test_the_first_turn_after_a_restart_still_gets_the_wake_note(tmp_path: Path) -> None:
    clock = FakeClock(START)
    trunk = echo_trunk()
    async with rig(tmp_path / "home", clock=clock, models={"trunk": trunk}) as r:
        await r.say("we settled on Porto for May")
        woken = (await r.cycle.run("nightly")).new_session_id
    # The daemon restarts before the person says anything in the new session.
    async with rig(tmp_path / "home", clock=clock, models={"trunk": trunk}) as r2:
        assert r2.trunk.session is not None and r2.trunk.session.id == woken
        await r2.say("morning!")
        assert "You slept (nightly)" in system_text(trunk.calls[-1])
        await r2.say("and now?")
        assert "You have just woken up" not in system_text(trunk.calls[-1])
