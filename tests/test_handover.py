"""Model handover through the real daemon: the official Anthropic SDK against the fake Messages
API, a model switch in the config between two runs, the letter in the first request on the new
model, a journal entry, `reverie handover --preview` and `reverie status` — and no letter when
nothing changed, for a fork, or when only another role's model changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.context.assembler import ContextAssembler
from daemon.context.handover import HandoverDesk, handover_status
from daemon.context.letter import voice_samples
from daemon.events import JournalNote
from daemon.models.base import Usage
from daemon.models.ledger import UsageLedger
from daemon.paths import Home
from daemon.settings import Settings
from daemon.sleep.exam import SelfExamPhase, answer
from daemon.sleep.exam_record import ExamItem, recent_exams
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel
from daemon.tokens import default_counter
from daemon.topics.router import TopicRouter
from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env, run_cli
from tests.sleep_support import START, rig
from tests.test_self_exam import FACTS as EXAM_FACTS

FRAMING = "You are in focused task mode. Your objective is: "
OLD, NEW = "claude-alpha-1", "claude-beta-2"
VOICE = "Morning, Marisol. The tide tables for Saturday look kind to your kayak plan: low water near nine."
USER_MD = """# About my person

- **Name / what to call you:** Marisol
- **Where you are (city, time zone):** Porto
- **How you like answers (short? detailed? examples? sources?):** short, plain prose, no bullet lists
- **Things I should never do:**
"""


def _config(trunk: str, delegate: str) -> str:
    return (
        FAKE_API_CONFIG
        + f'\n[models.trunk]\nprovider = "anthropic"\nmodel = "{trunk}"\n'
        + f'\n[models.delegate]\nprovider = "anthropic"\nmodel = "{delegate}"\n'
    )


def _system(req: RecordedRequest) -> str:
    system = req.body.get("system") or []
    if isinstance(system, str):
        return system
    return "\n".join(b.get("text", "") for b in system)


def _first_user_text(req: RecordedRequest) -> str:
    first = (req.body.get("messages") or [{}])[0].get("content")
    if isinstance(first, str):
        return first
    return " ".join(b.get("text", "") for b in first or [] if isinstance(b, dict))


def _is_fork(req: RecordedRequest) -> bool:
    return _first_user_text(req).startswith(FRAMING)


def _journal(home: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((home / "journal").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def _handover_entries(home: Path) -> list[dict[str, Any]]:
    return [e for e in _journal(home) if "handover" in (e.get("tags") or [])]


def _run(home: Path, fake: FakeAnthropic, *messages: str) -> list[RecordedRequest]:
    """Start the daemon, send each message in turn (waiting for its reply), stop; the requests."""
    before = len(fake.message_requests)
    d = DaemonProcess(
        home=home,
        env=daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}),
    )
    d.start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            for text in messages:
                _, frames = c.chat(text)
                assert frames[-1]["type"] == "done", frames[-1]
    finally:
        assert d.stop() == 0, d.logs()
    return fake.message_requests[before:]


def test_a_trunk_model_switch_hands_over_with_a_letter_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "persona").mkdir(parents=True)
    (home / "persona" / "USER.md").write_text(USER_MD)
    (home / "reverie.toml").write_text(_config(OLD, OLD))
    env = {"REVERIE_HOME": str(home)}
    with FakeAnthropic() as fake:
        # Run 1, on the old model: a reply in its voice.
        fake.enqueue(Planned.reply(VOICE))
        first_run = _run(home, fake, "Any news on the tides for my kayak trip?")
        assert [r.body["model"] for r in first_run] == [OLD]
        assert "## Handover" not in _system(first_run[0])  # a new home hands nothing over
        assert _handover_entries(home) == []

        # The person switches the trunk to a new model; before starting, the letter is previewed.
        (home / "reverie.toml").write_text(_config(NEW, OLD))
        preview = run_cli("handover", "--preview", "--home", str(home), env=daemon_env(env))
        assert preview.returncode == 0, preview.stderr
        assert f"anthropic:{OLD}" in preview.stdout and f"anthropic:{NEW}" in preview.stdout
        assert "Marisol" in preview.stdout and VOICE in preview.stdout
        assert "no bullet lists" in preview.stdout.split("How they like to be spoken to")[1]
        upcoming = run_cli("handover", "--json", "--home", str(home), env=daemon_env(env))
        assert json.loads(upcoming.stdout) == {
            "handover": None,
            "next_start": {"from": f"anthropic:{OLD}", "to": f"anthropic:{NEW}"},
        }
        # `reverie context` shows the layer the next turn gets, and why it is there.
        ctx = run_cli(
            "context", "--prompt", "hi", "--json", "--home", str(home), env=daemon_env(env)
        )
        assert ctx.returncode == 0, ctx.stderr
        row = next(r for r in json.loads(ctx.stdout)["layers"] if r["name"] == "handover")
        assert row["why"].startswith(
            f"the trunk's model changed from anthropic:{OLD} to anthropic:{NEW}"
        )
        assert row["tokens"] > 0

        # Run 2, on the new model: the first turn delegates, so a fork runs while the letter waits.
        fake.enqueue(
            Planned.tool("delegate", {"task": "Check the tide table for Saturday", "context": ""}),
            Planned(
                tool_calls=(
                    ("task_complete", {"summary": "Low water 09:12.", "outcome": "success"}),
                )
            ),
            Planned.reply("Low water is at 09:12 on Saturday."),
            Planned.reply("Glad it helps."),
        )
        second_run = _run(home, fake, "And the tide on Saturday exactly?", "Thanks!")
        trunk = [r for r in second_run if not _is_fork(r)]
        forks = [r for r in second_run if _is_fork(r)]
        assert [r.body["model"] for r in trunk] == [NEW, NEW, NEW] and forks
        letter = _system(trunk[0])
        assert "## Handover" in letter
        assert f"You were running on anthropic:{OLD}" in letter and f"anthropic:{NEW}" in letter
        assert VOICE in letter and "Marisol" in letter
        # Delimited as the agent's own memory: inside memory markers.
        assert '<memory kind="handover"' in letter or 'kind="handover"' in letter
        # The whole first turn carries it (its second request, after the fork, too) ...
        assert "## Handover" in _system(trunk[1])
        # ... never a fork, and not the turn after the first was answered.
        assert all("## Handover" not in _system(r) for r in forks)
        assert "## Handover" not in _system(trunk[2])
        entries = _handover_entries(home)
        assert len(entries) == 1
        assert entries[0]["summary"] == f"model handover: anthropic:{OLD} → anthropic:{NEW}"

        status = run_cli("status", "--json", "--home", str(home), env=daemon_env(env))
        info = json.loads(status.stdout)["handover"]
        assert (info["from"], info["to"], info["pending"]) == (
            f"anthropic:{OLD}",
            f"anthropic:{NEW}",
            False,
        )
        assert info["delivered_at"]
        text = run_cli("status", "--home", str(home), env=daemon_env(env)).stdout
        told = run_cli("handover", "--home", str(home), env=daemon_env(env)).stdout
        assert told.startswith(f"handover: anthropic:{OLD} → anthropic:{NEW} on ")
        assert "letter delivered" in told and "next start" not in told
        ctx = run_cli(
            "context", "--prompt", "hi", "--json", "--home", str(home), env=daemon_env(env)
        )
        row = next(r for r in json.loads(ctx.stdout)["layers"] if r["name"] == "handover")
        assert row["why"].startswith("not shown") and row["tokens"] == 0
        assert f"handover:     anthropic:{OLD} → anthropic:{NEW} on " in text

        # Run 3: only the delegate role changes model — no letter, no new entry.
        (home / "reverie.toml").write_text(_config(NEW, "claude-gamma-3"))
        fake.enqueue(Planned.reply("Still here."))
        third_run = _run(home, fake, "Hello again")
        assert [r.body["model"] for r in third_run] == [NEW]
        assert "## Handover" not in _system(third_run[0])
        assert len(_handover_entries(home)) == 1


# -- in-process: when a handover is due, and what the first turn after one keeps ---------------


async def _desk(home: Home, db: Database, clock: FakeClock, current: str) -> HandoverDesk:
    return HandoverDesk(home=home, db=db, settings=Settings(), clock=clock, current=current)


@pytest.mark.anyio
async def test_a_restart_keeps_one_handover_and_switching_back_before_the_first_turn_withdraws_it(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    clock = FakeClock(START)
    notes: list[JournalNote] = []
    async with EventBus() as bus, await Database.open_configured(home.db_file, Settings()) as db:
        bus.on(JournalNote, notes.append, name="test.notes")
        # A new home: nobody answered yet, so nothing is handed over.
        assert await (await _desk(home, db, clock, "anthropic:a")).notice(bus) is None
        await (await _desk(home, db, clock, "anthropic:a")).turn_answered("t-1")
        clock.advance(hours=3)
        first = await (await _desk(home, db, clock, "anthropic:b")).notice(bus)
        assert first is not None and (first.from_model, first.to_model) == (
            "anthropic:a",
            "anthropic:b",
        )
        # A restart before the first turn on b: the same handover still waits, no second entry.
        again = await _desk(home, db, clock, "anthropic:b")
        assert await again.notice(bus) == first and again.pending == first
        await bus.drain()
        assert [n.summary for n in notes] == ["model handover: anthropic:a → anthropic:b"]
        # Back to a before b ever answered: nothing was handed over.
        back = await _desk(home, db, clock, "anthropic:a")
        assert await back.notice(bus) is None and back.pending is None
        assert (await handover_status(db)) is None
        assert len(notes) == 1


@pytest.mark.anyio
async def test_an_older_home_reads_the_ledger_where_a_dated_name_is_the_model_it_answers_for(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    clock = FakeClock(START)
    async with await Database.open_configured(home.db_file, Settings()) as db:
        await UsageLedger(db, Settings().spend, clock).record(
            role="trunk",
            provider="anthropic",
            model="claude-sonnet-4-5-20250929",
            usage=Usage(input_tokens=10, output_tokens=5),
            turn_id="t-1",
        )
        # A fork's (the delegate role's) call is not the trunk's.
        await UsageLedger(db, Settings().spend, clock).record(
            role="delegate", provider="openai", model="qwen3", usage=Usage(), turn_id="t-2"
        )
        assert await (await _desk(home, db, clock, "anthropic:claude-sonnet-4-5")).notice() is None
        moved = await (await _desk(home, db, clock, "openai:qwen3")).notice()
        assert moved is not None
        assert moved.from_model == "anthropic:claude-sonnet-4-5-20250929"
        assert moved.until == START


@pytest.mark.anyio
async def test_first_turn_continuity_after_a_switch_is_within_two_points_of_staying(
    tmp_path: Path,
) -> None:
    """The night's self-exam on the old model, then the same questions answered from the
    context of the first turn on a new model (the letter in it): within 2 points."""
    async with rig(tmp_path, phases=lambda t: [WakeUp(t), SelfExamPhase()]) as r:
        for attribute, value in EXAM_FACTS:
            await r.memory.facts.remember(f"My {attribute} is {value}")
        await r.memory.facts.remember("My tea is now genmaicha, not sencha")
        await r.cycle.run("manual")
        (before,) = await recent_exams(r.db)
        old = HandoverDesk(
            home=r.home, db=r.db, settings=r.settings, clock=r.clock, current="anthropic:old"
        )
        await old.turn_answered("t-old")
        desk = HandoverDesk(
            home=r.home,
            db=r.db,
            settings=r.settings,
            clock=r.clock,
            current="anthropic:new",
            view=r.memory.view,
        )
        assert await desk.notice() is not None
        assembler = ContextAssembler(
            home=r.home,
            settings=r.settings,
            view=r.memory.view,
            router=TopicRouter(r.home, r.settings.topics),
            counter=default_counter(),
            clock=r.clock,
            handover=desk,
        )
        items = [ExamItem.from_json(i.to_json()) for i in before.items]
        await answer(items, assembler, session_id=r.trunk.session.id)
        after = round(100 * sum(i.result == "hit" for i in items) / len(items), 1)
        letter = (await assembler.assemble("hello")).report
        # The first sleep after the switch: its exam is told beside the old model's, once.
        r.clock.advance(hours=20)
        await r.cycle.run("manual")
        r.clock.advance(hours=24)
        await r.cycle.run("manual")
        await r.bus.drain()
        told = [e.summary for e in r.events if isinstance(e, JournalNote) and "handover" in e.tags]
        status = await handover_status(r.db)
    shown = {row["name"]: row["tokens"] for row in letter["layers"]}
    assert shown["handover"] > 0  # the letter is there, and competes for the budget
    print(f"self-exam on the old model {before.score:g}; first turn on the new model {after:g}")
    assert abs(before.score - after) <= 2
    assert told == [
        f"self-exam after the model handover: {status['exam_after']['score']:g} on anthropic:new "
        f"(last on the old model: {before.score:g} on anthropic:old)"
    ]
    assert status["exam_before"]["cycle_id"] == before.cycle_id
    assert status["exam_after"]["cycle_id"] != before.cycle_id


@pytest.mark.anyio
async def test_its_voice_is_short_replies_of_a_real_model_when_one_has_spoken(
    tmp_path: Path,
) -> None:
    offline_says = "I'm Reverie's offline model: I can keep notes, but I cannot think this through."
    real_says = "Morning! The kettle is on; shall we start with the garden plan or the tax forms?"
    tool_chatter = "Here is the script:\n```sh\nls -la ~/garden\n```\nRun it and tell me."
    rambling = "A long answer. " * 40
    offline = ScriptedModel(script=[Reply(text=offline_says)], provider="offline")
    async with rig(tmp_path, models={"trunk": offline}) as r:
        await r.say("hello")
    real = ScriptedModel(
        script=[Reply(text=tool_chatter), Reply(text=rambling), Reply(text=real_says)],
        provider="anthropic",
    )
    async with rig(tmp_path, models={"trunk": real}) as r:
        for text in ("a script please", "tell me everything", "good morning"):
            await r.say(text)
        # Its first turn on the new model read the letter, voiced by the only model that had spoken.
        first = "\n".join(b.text for b in real.calls[0].system)
        assert "## Handover" in first and offline_says in first
        assert "## Handover" not in "\n".join(b.text for b in real.calls[1].system)
        samples = [text for _, text in await voice_samples(r.db, prefer="offline", limit=5)]
    assert samples == [real_says]
