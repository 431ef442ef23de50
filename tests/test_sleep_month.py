"""A simulated month on the injectable clock: daily conversations through the real trunk and the
offline model, a sleep every night (maintenance, dreams, wake-up), one stop mid-cycle and one
message during sleep — asserted on the files and the database."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.agent.inbox import Inbox
from daemon.agent.turns import TurnDone
from daemon.clock import FakeClock
from daemon.durable import read_jsonl
from daemon.lifecycle import DaemonState
from daemon.settings import SchedulerSettings, Settings, SleepSettings
from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.phases import PhaseContext, PhaseReport
from daemon.sleep.revisions import RevisionStore
from daemon.sleep.wake import WakeUp
from tests.sleep_support import START, rig, transcript_records, wait_until

pytestmark = pytest.mark.anyio

DAYS = 30
CRASH_NIGHT = 9
MESSAGE_NIGHT = 19


class GatedDreams(DreamsPhase):
    """The real dreams phase, held at its start on chosen nights until the test lets it go."""

    def __init__(self) -> None:
        self.gates: dict[int, anyio.Event] = {}
        self.night = -1
        self.started: list[str] = []

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        self.started.append(ctx.cycle_id)
        gate = self.gates.get(self.night)
        if gate is not None:
            await gate.wait()
        return await super().run(ctx)


REMEMBERED = [
    "the boiler service is due in April",
    "I am always allergic to penicillin",
    "the dentist appointment is on 2026-03-05",  # a dated plan: retired a week after its date
    "my passport number ends in 4417",
    "the wifi password at the cabin is heron-tide",
    "Ada prefers tea over coffee",
    "the car insurance renews in September",
    "our landlord is called Mr Okafor",
    "the bike lock combination is 7391",
    "my running shoes are size 43",
    "Tomas owes me twenty euros",
    "the library card expires in June",
    "the spare key is under the blue pot",
    "my blood type is A negative",
    "the gym closes at nine on Sundays",
    "Joana's birthday is on the fourteenth of May",
    "the recycling goes out on Thursdays",
    "the plumber's number is on the fridge",
    "my pension fund is with Atlas Mutual",
    "the cat's vet is Dr Serrano",
    "the solar panels were installed in 2024",
    "the garage door code is 5528",
    "my sister's flight lands at gate 12",
    "the lease ends in November",
    "the choir meets on Tuesday evenings",
    "my tax adviser is Helena Duarte",
    "the printer ink model is XL-305",
    "the allotment plot number is 31",
    "the babysitter charges twelve euros an hour",
    "the water meter reading was 4521",
]
NAMES = ["Ines", "Tomas", "Rui", "Marta", "Joana", "Pedro", "Ana", "Luis"]
PLANTS = ["basil", "fern", "lemon tree", "orchid", "rosemary", "cactus"]
DECISIONS = [
    "We decided to water the {plant} every {n} days.",
    "We decided to keep the trip budget under {n}00 euros and book the hotel early.",
    "We decided to put {n}0 euros a month into savings before any other expenses.",
]


def day_messages(day: int) -> list[str]:
    """Three messages a day: a fact to remember, a fact said in passing, and a decision."""
    passing = (
        f"My colleague {NAMES[day % len(NAMES)]} started on the harbour project in week {day}."
    )
    if day % 7 == 3:
        passing = "The pharmacist asked again, since I am allergic to penicillin."
    return [
        f"remember that {REMEMBERED[day]}",
        passing,
        DECISIONS[day % len(DECISIONS)].format(plant=PLANTS[day % len(PLANTS)], n=day % 3 + 2),
    ]


def month_settings() -> Settings:
    return Settings(
        scheduler=SchedulerSettings(timezone="UTC"),
        sleep=SleepSettings(fold_after_days=7, retire_after_days=7, jitter_minutes=0),
    )


async def test_a_simulated_month_of_days_and_nights(tmp_path: Path) -> None:
    clock = FakeClock(START)
    dreams = GatedDreams()
    root = tmp_path / "home"
    phases = lambda t: [MaintenancePhase(), dreams, WakeUp(t)]  # noqa: E731
    cfg = month_settings()
    said: list[str] = []
    turns: list[str] = []
    wake_texts: list[str] = []
    cycles_seen: list[str] = []
    message_during_sleep: dict[str, Any] = {}

    day = 0
    crashed = False
    while day < DAYS:
        async with rig(root, settings=cfg, clock=clock, phases=phases) as r:
            if crashed:
                # Restarted: the interrupted cycle resumes before anything is answered.
                dreams.gates[CRASH_NIGHT].set()
                await wait_until(lambda: r.cycle.last is not None, "the resumed cycle")
                assert r.cycle.last is not None and r.cycle.last.cycle_id == cycles_seen[-1]
                wake_texts.append(r.home.wake_file.read_text())
                crashed = False
            while day < DAYS:
                clock.set(START + timedelta(days=day))
                for text in day_messages(day):
                    said.append(text)
                    turns.append(await r.say(text))
                clock.set(
                    START + timedelta(days=day + 1, hours=-5, minutes=-30)
                )  # 03:30 the next morning
                dreams.night = day
                if day in (CRASH_NIGHT, MESSAGE_NIGHT):
                    dreams.gates[day] = anyio.Event()
                    cycle = await r.cycle.start("nightly")
                    cycles_seen.append(cycle.id)
                    # Dreaming once the phase itself runs: its attempt is on record by then.
                    await wait_until(lambda c=cycle.id: c in dreams.started, "dreaming")
                    assert r.lifecycle.state is DaemonState.ASLEEP
                if day == CRASH_NIGHT:
                    day += 1
                    crashed = True
                    break  # the daemon stops mid-cycle; the next start resumes it
                if day == MESSAGE_NIGHT:
                    turn = await r.say(
                        "sorry to wake you, where did we leave the lemon tree?", wait=False
                    )
                    reply = await r.answered(turn)
                    assert isinstance(reply, TurnDone)
                    message_during_sleep.update(turn=turn, cycle=cycle.id, change=r.changes[-1])
                    turns.append(turn)
                else:
                    result = await r.cycle.nightly()
                    assert "wake_up done" in result, result
                    assert r.cycle.last is not None
                    cycles_seen.append(r.cycle.last.cycle_id)
                wake_texts.append(r.home.wake_file.read_text())
                day += 1
            if crashed:
                continue
            # -- the month is over: look at the files and the database -------------------------
            home = r.home
            cycles = await r.rows(
                "SELECT id, status, new_session_id, woke_early, deferred, resumed FROM sleep_cycles ORDER BY started_at"
            )
            phase_rows = await r.rows("SELECT cycle_id, phase, status, attempts FROM sleep_phases")
            sessions = await r.rows(
                "SELECT id, previous_id FROM sessions WHERE kind = 'trunk' ORDER BY started_at"
            )
            folds = await r.rows("SELECT COUNT(*), COUNT(DISTINCT month_uid) FROM memory_folds")
            facts = {f.text: f for f in r.memory.facts.facts(include_retired=True)}
            revisions = await RevisionStore(home, r.db).recent()
            pending = r.trunk.inbox.pending()

    # Every night slept exactly once, to the end; the crash night's cycle resumed once.
    assert len(cycles) == DAYS and [c[0] for c in cycles] == cycles_seen
    assert all(c[1] == "done" for c in cycles)
    crash = cycles[CRASH_NIGHT]
    assert crash[5] == 1
    # No phase ran twice: one row per (cycle, phase), each final; only the interrupted dreams had two attempts.
    keys = [(row[0], row[1]) for row in phase_rows]
    assert len(keys) == len(set(keys)) == DAYS * 4
    assert all(row[2] in ("done", "deferred") for row in phase_rows), [
        row for row in phase_rows if row[2] not in ("done", "deferred")
    ]
    twice = [(row[0], row[1]) for row in phase_rows if row[3] != 1]
    assert twice == [(crash[0], "dreams")]
    # The message during sleep: dreams deferred (and run the next night), the person told, answered in the new session.
    woke = next(c for c in cycles if c[0] == message_during_sleep["cycle"])
    assert woke[3] == 1 and json.loads(woke[4]) == ["dreams"]
    assert "woke early" in message_during_sleep["change"].detail
    answered_in = [
        x["_file"]
        for x in transcript_records(home)
        if x.get("type") == "turn_end" and x.get("turn_id") == message_during_sleep["turn"]
    ]
    assert answered_in == [woke[2]]
    after = cycles[MESSAGE_NIGHT + 1][0]
    assert (after, "dreams", "done", 1) in phase_rows
    # One session per day, each linked to the one before; each cycle woke into the next.
    assert len(sessions) == DAYS + 1
    assert all(sessions[i + 1][1] == sessions[i][0] for i in range(DAYS))
    assert [c[2] for c in cycles] == [s[0] for s in sessions[1:]]
    # Nothing lost: every message answered exactly once, nothing pending.
    ends = [x["turn_id"] for x in transcript_records(home) if x.get("type") == "turn_end"]
    assert sorted(ends) == sorted(turns) and not pending and Inbox(home.inbox_file).load() == []
    # WAKE.md regenerated each night, from that day.
    assert len(set(wake_texts)) == len(wake_texts) == DAYS
    # The last letter carries the last day and the latest facts, not the month's first days.
    assert REMEMBERED[29] in wake_texts[-1] and "week 29" in wake_texts[-1]
    assert REMEMBERED[5] not in wake_texts[-1]
    assert (home.root / "WAKE.md").read_text() == wake_texts[-1]
    # Maintenance: monthly summary with its sources linked (and kept); a pinned constraint; a stale plan retired.
    month_files = sorted((home.memory_dir / "months").glob("month-*.md"))
    assert [p.name for p in month_files] == ["month-2026-03.md"]
    assert folds[0][0] >= 10 and folds[0][1] == 1
    assert len(list(home.summaries_dir.glob("session-*.md"))) >= DAYS
    pinned = (home.root / "FACTS.md").read_text()
    assert "penicillin" in pinned, pinned
    dentist = facts["the dentist appointment is on 2026-03-05"]
    assert not dentist.active and "stale" in dentist.reason
    assert facts["I am always allergic to penicillin"].active
    # Every remembered fact is in the facts log (nothing lost across the stop).
    # (Relative dates are resolved when a fact is written; the person's wording is kept beside.)
    logged = [
        str(e.get("wording") or e.get("text")) for e in read_jsonl(home.memory_dir / "facts.jsonl")
    ]
    missing = [fact for fact in REMEMBERED if fact not in logged]
    assert not missing, (missing, logged)
    # Dreams: journal entries, and revisions that can be reverted.
    assert len(list(home.dreams_dir.glob("*.md"))) >= DAYS - 1
    applied = [rv for rv in revisions if rv.status == "applied"]
    assert applied, (sorted(home.dreams_dir.glob("*.md"))[-1].read_text(), revisions)
    newest = max(applied, key=lambda rv: rv.created_at)
    target = home.root / newest.files[0].path
    assert target.read_text() == newest.files[0].after
    async with rig(root, settings=cfg, clock=clock, phases=phases) as r:
        reverted = await RevisionStore(r.home, r.db).revert(newest.id, now=clock.now())
    assert reverted.status == "reverted" and target.read_text() == newest.files[0].before
    assert said  # the conversation happened
