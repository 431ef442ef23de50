"""The continuity self-exam after every wake: through the real daemon and in-process.

The daemon test seeds facts, sleeps (`reverie sleep --wait`, offline model), and reads the
exam back from `reverie exam --json` and `status --json`; then it takes automatic recall out
of the context (a config change and a restart) and sleeps again: the score must fall, and the
person is told once, by a notice naming what was lost. The in-process tests check the parts
the daemon test cannot see: a superseded value alone is a miss named `stale`, the strata by
age, no model call offline, one call with a model, and its failure worded offline.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.clock import FakeClock
from daemon.memory.facts import Fact
from daemon.models.base import ModelError, ModelRequest
from daemon.settings import MemorySettings, SchedulerSettings, Settings
from daemon.sleep.exam import SelfExamPhase, fact_item, pick, score_item
from daemon.sleep.exam_record import Exam, ExamItem, exam_status, recent_exams, save_exam
from daemon.sleep.phases import PhaseContext
from daemon.sleep.wake import WakeUp
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel
from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.sleep_support import START, rig
from tests.web_pages_support import filled_console

# Twenty facts about the person, each with its own key ("my X is Y"): more than the recent
# layers (themes, recollections) show, so the older ones reach the context through recall.
FACTS = [
    ("dentist", "Dr Lee"),
    ("favourite colour", "teal"),
    ("gym day", "Saturday"),
    ("bank", "Nordea"),
    ("car", "a green Volvo"),
    ("landlord", "Mrs Haugen"),
    ("piano teacher", "Ingrid Solberg"),
    ("football club", "Rosenborg"),
    ("allergy", "hazelnuts"),
    ("blood type", "AB negative"),
    ("cat", "Pepper"),
    ("employer", "Kvaerner"),
    ("favourite author", "Ursula Le Guin"),
    ("hometown", "Trondheim"),
    ("laptop", "a ThinkPad X1"),
    ("mobile carrier", "Telenor"),
    ("running shoes", "Hoka Clifton"),
    ("tea", "genmaicha"),
    ("violin", "a Hopf copy"),
    ("barber", "Kjell"),
]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(*args, "--home", str(home), timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _remember(c: Client, text: str) -> dict[str, Any]:
    reply = c.command("remember", {"text": text, "target": "memory", "tags": []})
    assert reply["type"] == "result", reply
    return reply


def test_the_exam_after_a_sleep_is_scored_from_the_context_and_falls_when_a_layer_goes(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            for attribute, value in FACTS:
                _remember(c, f"My {attribute} is {value}")
            changed = _remember(c, "My dentist is now Dr Okafor, not Dr Lee")
            assert changed["data"]["status"] == "corrected", changed
        slept = _cli(home, "sleep", "--wait")
        assert "self_exam" in slept.stdout and "score 100, 12/12 found" in slept.stdout, (
            slept.stdout
        )
        first = json.loads(_cli(home, "exam", "--json").stdout)
        assert first["questions"] == 12 and first["score"] == 100.0, first
        dentist = next(i for i in first["items"] if "dentist" in i["about"])
        assert dentist["stratum"] == "change" and dentist["result"] == "hit"
        assert dentist["expected"] == ["okafor"] and ["lee"] in dentist["stale"]
        for item in first["items"]:
            # Asked in words other than the memory's: never the fact's own sentence.
            assert item["answer"] not in item["question"], item
        status = json.loads(_cli(home, "status", "--json").stdout)
        assert status["self_exam"]["score"] == 100.0
        assert status["self_exam"]["trend"] == [100.0]
        assert "self-exam:    100 · 12/12 found · trend █ 100" in _cli(home, "status").stdout
        journal = _cli(home, "journal", "--tail", "20").stdout
        assert "sleep · self_exam: score 100, 12/12 found" in journal
        assert d.stop() == 0

        # Automatic recall out of the context: what only recall brought in is lost.
        config = home / "reverie.toml"
        config.write_text(config.read_text() + "\n[memory]\nauto_recall = false\n")
        d.start()
        _cli(home, "sleep", "--wait")
        second = json.loads(_cli(home, "exam", "--json").stdout)
        assert second["score"] < first["score"] - 5, second
        assert second["previous"] == 100.0 and second["trend"] == [100.0, second["score"]]
        lost = [i for i in second["items"] if i["result"] != "hit"]
        assert lost and all(i["found_in"] in ("", "recall") for i in lost)
        listed = _cli(home, "notices", "--all", "--json").stdout.splitlines()
        notices = [json.loads(line) for line in listed if line.strip()]
        told = [n for n in notices if "self-exam" in n["text"]]
        assert len(told) == 1, notices
        assert f"fell from 100 to {second['score']:g}" in told[0]["text"]
        for item in lost[:6]:
            assert item["answer"] in told[0]["text"]
        shown = _cli(home, "exam").stdout
        assert "missed:" in shown and lost[0]["answer"] in shown
        assert d.stop() == 0
        # With the daemon down, status reads the exam from the store.
        down = json.loads(_cli(home, "status", "--json").stdout)
        assert down["running"] is False and down["self_exam"]["score"] == second["score"]
    finally:
        if d.proc is not None and d.proc.poll() is None:
            assert d.stop() == 0


def _fact(n: int, subject: str, attribute: str, value: str, at: Any, **kw: Any) -> Fact:
    return Fact(
        id=f"fact:{n}",
        target="memory",
        text=kw.pop("text", f"My {attribute} is {value}"),
        wording="",
        origin=kw.pop("origin", "person"),
        created_at=at,
        subject=subject,
        attribute=attribute,
        value=value,
        **kw,
    )


def test_a_superseded_value_alone_is_a_stale_miss_and_the_current_one_a_hit() -> None:
    old = _fact(1, "person", "dentist", "Dr Lee", START, superseded_by="fact:2")
    new = _fact(2, "person", "dentist", "Dr Okafor", START + timedelta(days=1), supersedes="fact:1")
    item = fact_item(new, "change", [old, new])
    assert item is not None and item.expected == ["okafor"] and item.stale == [["lee"]]
    assert "Okafor" not in item.question and "Lee" not in item.question
    changed = [("recall", "- My dentist is now Dr Okafor (changed from Dr Lee on 2 Mar)")]
    assert score_item(item, changed) == ("hit", "recall")
    assert score_item(item, [("themes", "- My dentist is Dr Lee")]) == ("stale", "themes")
    assert score_item(item, [("themes", "- My gym day is Saturday")]) == ("miss", "")


def test_a_short_name_is_matched_as_a_word_a_longer_one_in_its_inflections_too() -> None:
    sam = fact_item(_fact(6, "person", "partner", "Sam", START), "week", [])
    assert sam is not None and sam.expected == ["sam"]
    assert score_item(sam, [("persona", "Answer in the same voice as before.")])[0] == "miss"
    assert score_item(sam, [("recall", "My partner Sam will join the dinner.")])[0] == "hit"
    walls = fact_item(_fact(7, "nursery", "value", "ochre walls", START), "week", [])
    assert walls is not None
    assert score_item(walls, [("wake", "- We painted the wall ochre")])[0] == "hit"


def test_a_normalised_value_is_looked_for_in_the_words_the_memory_holds() -> None:
    fact = _fact(5, "ana", "relation", "the person's sister", START, text="Ana is my sister")
    item = fact_item(fact, "week", [fact])
    assert item is not None and item.question == "Who is Ana to me?"
    assert item.expected == ["sister"]
    assert score_item(item, [("profile", "- Ana is my sister")]) == ("hit", "profile")


def test_a_fact_without_a_key_is_asked_by_its_topic_with_its_answer_left_out() -> None:
    fact = _fact(3, "", "", "", START, text="My sister lives in Lisbon near the river")
    item = fact_item(fact, "week", [fact])
    assert item is not None
    assert item.question == "What do you remember about my sister?"
    assert "lisbon" in item.expected and "sister" not in item.expected
    assert (
        score_item(item, [("recall", "Ana (my sister) lives in Lisbon by the river")])[0] == "hit"
    )
    assert score_item(item, [("recall", "Lisbon is in Portugal")])[0] == "miss"
    decided = _fact(4, "", "", "", START, text="We decided to use PostgreSQL for the ledger")
    asked = fact_item(decided, "week", [decided])
    assert asked is not None and asked.question == "What do you remember about the ledger?"
    assert "postgresql" in asked.expected and "ledger" not in asked.expected


def test_the_sample_spans_changes_this_week_this_year_and_years_ago() -> None:
    now = START
    facts = [
        _fact(1, "person", "bank", "Nordea", now - timedelta(days=2)),
        _fact(2, "person", "car", "Volvo", now - timedelta(days=90)),
        _fact(3, "person", "school", "NTNU", now - timedelta(days=3 * 365)),
        _fact(4, "person", "tea", "sencha", now - timedelta(days=1), supersedes="fact:9"),
        _fact(5, "person", "tool", "hammer", now, origin="tool"),  # untrusted: not asked
        _fact(6, "person", "hat", "fedora", now, retired_at=now),  # retired: not asked
    ]
    items = pick(
        facts,
        now=now,
        seed="night-1",
        history={},
        threads=["Book the plumber for the kitchen sink"],
    )
    by = {i.key: i.stratum for i in items}
    assert by == {
        "fact:4": "change",
        "fact:1": "week",
        "fact:2": "year",
        "fact:3": "older",
        "open:1": "open",
    }
    assert len(pick(facts, now=now, seed="x", history={}, limit=2)) == 2


async def _nights(root: Path, models: dict[str, Any] | None = None) -> list[Any]:
    async with rig(root, models=models, phases=lambda t: [WakeUp(t), SelfExamPhase()]) as r:
        for attribute, value in FACTS:
            await r.memory.facts.remember(f"My {attribute} is {value}")
        await r.cycle.run("manual")
        # What recall showed the exam is no use of a fact: nothing is counted.
        await r.memory.index.uses.flush()
        assert await r.rows("SELECT uid FROM memories WHERE uses > 0") == []
        return await recent_exams(r.db)


@pytest.mark.anyio
async def test_offline_the_exam_makes_no_model_call(tmp_path: Path) -> None:
    counted = ScriptedModel(script=[], provider="offline")  # fails the test if ever called
    exams = await _nights(tmp_path, {"dreams": counted})
    assert exams[0].worded_by == "offline" and exams[0].score == 100.0
    assert counted.calls == []


@pytest.mark.anyio
async def test_with_a_model_one_call_rewords_every_question_that_does_not_give_itself_away(
    tmp_path: Path,
) -> None:
    def rephrase(request: ModelRequest) -> Reply:
        asked = request.messages[0].content[0].text  # type: ignore[union-attr]
        topics = [json.loads(line) for line in asked.splitlines() if line.startswith("{")]
        out = {t["id"]: f"Quick check number {t['id']}: do you recall that bit?" for t in topics}
        for t in topics:
            if "dentist" in t["topic"]:
                out[t["id"]] = "Is my dentist still Dr Lee?"  # holds its own answer
        return Reply(text=json.dumps({"questions": out}))

    model = ScriptedModel(script=rephrase, provider="scripted")
    exams = await _nights(tmp_path, {"dreams": model})
    assert len(model.calls) == 1
    items = exams[0].items
    dentist = next(i for i in items if "dentist" in i.about)
    assert dentist.question == "Remind me: what is my dentist?"  # gave itself away: offline
    others = [i for i in items if i is not dentist]
    assert all(i.question.startswith("Quick check number") for i in others)
    assert exams[0].worded_by == f"the dreams model ({len(others)}/{len(items)})"


@pytest.mark.anyio
async def test_a_failing_model_leaves_the_questions_worded_offline(tmp_path: Path) -> None:
    model = ScriptedModel(
        script=[Reply(text="", error=ModelError("overloaded", retryable=True))],
        provider="scripted",
    )
    exams = await _nights(tmp_path, {"dreams": model})
    assert len(model.calls) == 1
    assert exams[0].worded_by.startswith("offline: the model failed")
    assert all(isinstance(i, ExamItem) and i.question for i in exams[0].items)
    assert exams[0].score == 100.0


@pytest.mark.anyio
async def test_the_console_now_page_shows_the_exam_over_nights(tmp_path: Path) -> None:
    async with filled_console(tmp_path) as console:
        page = (await console.client.get("/")).text
        exams = await recent_exams(console.rig.db)
        assert len(exams) == 1
        line = re.search(r'<p class="self-exam" id="self-exam">(.*?)</p>', page, re.S)
        assert line is not None, page
        shown = " ".join(line.group(1).split())
        assert f"<strong>{exams[0].score:g}</strong>" in shown
        assert f"{exams[0].hits}/{len(exams[0].items)} found" in shown
        assert "last 1 night" in shown


def test_status_renders_the_exam_in_one_line() -> None:
    from daemon.cli.status import render

    exam = {
        "score": 75.0,
        "previous": 100.0,
        "trend": [100.0, 75.0],
        "spark": "█▆",
        "at": "2026-03-03T03:30:00+00:00",
        "questions": 4,
        "misses": ['person · bank → "Nordea" (not in the context)'],
    }
    lines = render({"state": "awake", "running": True, "self_exam": exam}).splitlines()
    assert (
        'self-exam:    75 (was 100) · 3/4 found · trend █▆ 100 75 · missed: person · bank → "Nordea"'
        " (not in the context)"
    ) in lines


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_exams_are_kept_alike_on_both_backends(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    async with await Database.open(tmp_path / "reverie.db", url=url, namespace="exam") as db:
        assert await exam_status(db) is None
        for n, results in enumerate((["hit", "hit"], ["hit", "stale"])):
            items = [
                ExamItem(key=f"fact:{k}", stratum="week", question="q?", expected=["x"], result=r)
                for k, r in enumerate(results)
            ]
            exam = Exam(cycle_id=f"c{n}", taken_at=START + timedelta(days=n), worded_by="offline",
                        items=items)  # fmt: skip
            await save_exam(db, exam)
            await save_exam(db, exam)  # a re-run after a crash keeps the first
        status = await exam_status(db)
    assert status is not None
    assert (status["score"], status["previous"], status["trend"]) == (50.0, 100.0, [100.0, 50.0])
    assert status["cycle_id"] == "c1" and len(status["misses"]) == 1


@pytest.mark.anyio
async def test_a_night_asks_of_years_ago_this_year_this_week_and_what_changed(
    tmp_path: Path,
) -> None:
    clock = FakeClock(START - timedelta(days=1000))
    async with rig(tmp_path, clock=clock, phases=lambda t: [WakeUp(t), SelfExamPhase()]) as r:
        await r.memory.facts.remember("My school is NTNU")
        clock.advance(days=900)
        await r.memory.facts.remember("My bank is Nordea")
        clock.advance(days=97)
        await r.memory.facts.remember("My barber is Kjell")
        clock.advance(days=2)
        await r.memory.facts.remember("My tea is sencha")
        await r.memory.facts.remember("My tea is now genmaicha, not sencha")
        await r.cycle.run("manual")
        (exam,) = await recent_exams(r.db)
    assert {i.about: i.stratum for i in exam.items} == {
        "person · tea": "change",
        "person · barber": "week",
        "person · bank": "year",
        "person · school": "older",
    }
    assert {i.about: i.result for i in exam.items} == dict.fromkeys(
        ("person · tea", "person · barber", "person · bank", "person · school"), "hit"
    )


@pytest.mark.anyio
async def test_a_night_with_nothing_to_ask_keeps_no_exam(tmp_path: Path) -> None:
    async with rig(tmp_path, phases=lambda t: [WakeUp(t), SelfExamPhase()]) as r:
        outcome = await r.cycle.run("manual")
        assert outcome.steps["self_exam"]["changed"].startswith("nothing to ask yet")
        assert await recent_exams(r.db) == [] and await exam_status(r.db) is None
        assert not [n for n in r.notes() if "self_exam" in n.tags]


@pytest.mark.anyio
async def test_a_drop_is_told_once_though_the_step_runs_again_after_a_crash_before_telling(
    tmp_path: Path,
) -> None:
    cfg = Settings(
        scheduler=SchedulerSettings(timezone="UTC"), memory=MemorySettings(auto_recall=False)
    )
    async with rig(tmp_path, settings=cfg) as r:
        for attribute, value in FACTS:
            await r.memory.facts.remember(f"My {attribute} is {value}")
        before = [
            ExamItem(key=f.id, stratum="week", question="?", expected=["x"], result="hit")
            for f in r.memory.facts.facts()
        ]
        await save_exam(
            r.db, Exam(cycle_id="c0", taken_at=START, worded_by="offline", items=before)
        )
        ctx = PhaseContext(
            cycle_id="c1", reason="manual", session_id=r.trunk.session.id, started_at=START,
            since=None, home=r.home, settings=r.settings, db=r.db, models=r.roles, bus=r.bus,
            clock=r.clock, memory=r.memory,
        )  # fmt: skip
        first = await SelfExamPhase().run(ctx)
        # A crash after the exam was kept and before the notice was: the step runs again.
        await r.db.execute("DELETE FROM notices WHERE key = 'self-exam:c1'")
        again = await SelfExamPhase().run(ctx)
        assert [e.cycle_id for e in await recent_exams(r.db)] == ["c1", "c0"]
        await SelfExamPhase().run(ctx)
        notices = await r.services.outbox.recent()
    assert first.details["score"] == again.details["score"] < 95
    told = [n for n in notices if n.key.startswith("self-exam:")]
    assert [n.key for n in told] == ["self-exam:c1"]
    assert "fell from 100 to" in told[0].text
