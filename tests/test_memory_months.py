"""Months in use: folded days reach recall, its planner, automatic recall, search and the context
as their month summary — on a real home, with sleep maintenance folding on a fake clock."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench.planner_index_bench import build_history
from daemon.memory.planner_index import FOUND_OLD_MONTHS, RECENT_MONTHS, top_level
from daemon.models.anthropic import AnthropicModel
from daemon.models.base import ModelUnavailable
from daemon.models.offline import OfflineModel
from daemon.settings import AnthropicSettings
from daemon.sleep.maintenance import fold_months
from daemon.tokens import count_tokens
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.memory_support import raising
from tests.sleep_phase_support import START, SleepRig, sleep_home, sleep_settings
from tests.test_recall_everyday import assembler, layer_ids

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
SUBJECTS = [
    ("sourdough", "We decided to feed the sourdough starter twice a day with rye flour."),
    ("budget", "We agreed the monthly budget puts 400 euros into the index fund."),
    ("bicycle", "We decided to replace the bicycle chain and the rear cassette."),
    ("novel", "We agreed chapter three of the novel needs a slower opening scene."),
]
PLANTED_DAY = 12  # 17 January
PLANTED = [
    ("user", "The greenhouse heater question is settled."),
    ("assistant", "The greenhouse heater runs on propane delivered by Kestrel Gas."),
]
QUESTION = "Which gas supplier delivers for the greenhouse heater?"
# A later session in the same month says when the supplier comes, without naming the heater:
# only the month holds both.
LATER_DAY = 15
LATER = [
    ("user", "Kestrel Gas rang about the deliveries."),
    ("assistant", "Noted: Kestrel Gas now comes on Thursday mornings."),
]
ONLY_THE_MONTH = "On which morning does the propane for the greenhouse heater come?"


def session_id(day: int) -> str:
    special = {PLANTED_DAY: "greenhouse", LATER_DAY: "deliveries"}
    return f"s{day:03d}-" + special.get(day, SUBJECTS[day % 4][0])


async def history(rig: SleepRig, days: int = 75) -> None:
    """One session a day from 5 January; then sleep maintenance folds all older than 30 days."""
    for day in range(days):
        subject, decision = SUBJECTS[day % len(SUBJECTS)]
        messages = {PLANTED_DAY: PLANTED, LATER_DAY: LATER}.get(
            day, [("user", f"Back to the {subject}, day {day}."), ("assistant", decision)]
        )
        await rig.add_session(
            session_id(day), messages, started=START + timedelta(days=day, hours=2)
        )
    rig.clock.set(START + timedelta(days=80))  # 26 March: cutoff 24 February
    await fold_months(rig.context())


async def folded_sources(rig: SleepRig, month: str) -> set[str]:
    rows = await rig.db.fetchall(
        "SELECT source_uid FROM memory_folds WHERE month_uid = ? AND source_uid LIKE 'summary:%'",
        (month,),
    )
    return {r[0] for r in rows}


def index_ids(prompt: str) -> list[str]:
    assert prompt.startswith("QUERY: ") and "\nINDEX:\n" in prompt
    return [line.split(" | ")[0] for line in prompt.split("\nINDEX:\n", 1)[1].splitlines()]


def prompt_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


async def test_the_planner_reads_a_month_in_place_of_its_days_and_opens_it(
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        planner = AnthropicModel(
            AnthropicSettings.model_validate(
                {"base_url": fake.url, "max_retries": 0, "timeout_s": 10.0}
            ),
            "sk-test",
        )
        fake.enqueue(
            Planned.reply(json.dumps({"ids": ["month:2026-01"]})),
            Planned.reply(json.dumps({"ids": [f"summary:{session_id(PLANTED_DAY)}"]})),
        )
        settings = sleep_settings(fold_after_days=30)
        with anyio.fail_after(60):
            async with (
                planner,
                sleep_home(
                    tmp_path / "home",
                    settings=settings,
                    models={"recall_planner": planner, "recall_synthesis": OfflineModel()},
                ) as rig,
            ):
                await history(rig)
                january = await folded_sources(rig, "month:2026-01")
                result = await rig.memory.recaller.recall(QUESTION)
        first, second = (prompt_text(r.body) for r in fake.message_requests)

    # Level one: the months stand in for the days they fold; the recent window stays day by day.
    ids = index_ids(first)
    assert "month:2026-01" in ids and "month:2026-02" in ids
    assert "| month-2026-01 | 2026-01 | January 2026: " in first
    unfolded = {f"summary:{session_id(d)}" for d in range(75) if d >= 50}
    assert {i for i in ids if i.startswith("summary:")} == unfolded
    assert len(ids) == len(unfolded) + 2
    # The month's line names the session the question is about first.
    month_line = next(line for line in first.splitlines() if line.startswith("month:2026-01 |"))
    assert "The greenhouse heater question is settled" in month_line
    # Level two: the planner picked the month, so it reads that month's sessions and nothing else.
    assert set(index_ids(second)) == january and f"summary:{session_id(PLANTED_DAY)}" in january
    # Then the picked session's summary is read, and the answer cites it.
    assert result.planner == "picked"
    assert [s.kind for s in result.sources] == ["summary"]
    assert result.sources[0].session_id == session_id(PLANTED_DAY)
    assert "Kestrel Gas" in result.answer and f"[{result.sources[0].cite}]" in result.answer


async def test_the_offline_planner_finds_a_folded_session_through_its_month(
    tmp_path: Path,
) -> None:
    offline = OfflineModel()
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home",
            settings=sleep_settings(fold_after_days=30),
            models={"recall_planner": offline, "recall_synthesis": offline},
        ) as rig:
            await history(rig)
            lines, left = await rig.memory.recaller.planner_lines(QUESTION)
            result = await rig.memory.recaller.recall(QUESTION)
    assert left == 0
    # The session is not in the first index at all: only its month could lead to it.
    assert not any(line.startswith(f"summary:{session_id(PLANTED_DAY)} ") for line in lines)
    assert result.planner == "picked"
    assert session_id(PLANTED_DAY) in {s.session_id for s in result.sources}
    assert "Kestrel Gas" in result.answer


async def test_without_a_planner_a_month_search_found_is_read_or_opened(tmp_path: Path) -> None:
    offline = OfflineModel()
    planner = raising(ModelUnavailable("the planner is down"))
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home",
            settings=sleep_settings(fold_after_days=30),
            models={"recall_planner": planner, "recall_synthesis": offline},
        ) as rig:
            await history(rig)
            await rig.memory.index.flush()
            # No session's summary names the month; the month does, so it is read itself.
            overview = await rig.memory.recaller.recall("What did January 2026 hold?")
            # The month holds both halves; the sessions behind them are read.
            opened = await rig.memory.recaller.recall(ONLY_THE_MONTH)
            # A month cites a session's chunk as `chunk:<session>:<seq>`; recall_session opens it.
            windows = await rig.memory.recall_session(f"chunk:{session_id(LATER_DAY)}:0", "Kestrel")
    assert overview.planner == opened.planner == "unavailable"
    month = next(s for s in overview.sources if s.kind == "month")
    assert month.cite == "month-2026-01" and f"[summary:{session_id(0)}]" in month.text
    assert {session_id(PLANTED_DAY), session_id(LATER_DAY)} <= {
        s.session_id for s in opened.sources if s.kind == "summary"
    }
    assert "Thursday mornings" in windows and session_id(LATER_DAY) in windows


async def test_a_month_only_answers_in_automatic_recall_and_memory_search(tmp_path: Path) -> None:
    question = ONLY_THE_MONTH
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home", settings=sleep_settings(fold_after_days=30)
        ) as rig:
            await history(rig)
            await rig.memory.index.flush()
            recalled = await rig.memory.view.auto_recall(question)
            january = await folded_sources(rig, "month:2026-01")
    month = next((i for i in recalled if i.id == "month:2026-01"), None)
    assert month is not None, [i.id for i in recalled]
    # Only the month holds both halves of the answer, each line citing the session it came from;
    # shown by the lines that bear on the question, not the whole month.
    planted, later = (f"[summary:{session_id(d)}]" for d in (PLANTED_DAY, LATER_DAY))
    lines = month.text.splitlines()
    assert any("greenhouse heater runs on propane" in ln and planted in ln for ln in lines)
    assert any("Thursday mornings" in ln and later in ln for ln in lines)
    assert len(lines) < 6 and {planted[1:-1], later[1:-1]} <= january

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    home = str(tmp_path / "home")
    with anyio.fail_after(60):
        out = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "daemon.cli",
                "memory",
                "search",
                "--home",
                home,
                "--json",
                question,
            ],
            env=env,
            check=True,
        )
    found = json.loads(out.stdout)
    hit = next((i for i in found if i["id"] == "month:2026-01"), None)
    assert hit is not None and hit["kind"] == "month", [i["id"] for i in found]
    assert "Thursday mornings" in hit["text"] and "greenhouse heater runs on propane" in hit["text"]
    assert planted in hit["text"] and later in hit["text"]


async def test_the_recollections_show_a_month_where_they_showed_its_folded_days(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home", settings=sleep_settings(fold_after_days=30)
        ) as rig:
            await history(rig, days=20)  # all in January, all older than 30 days on 26 March
            recent = await rig.memory.view.recent_summaries(4)
            result = await assembler(rig.memory, rig.home, rig.settings).assemble("good morning")
    assert [i.id for i in recent] == ["month:2026-01"]
    month = recent[0]
    # It stands for the four newest days, and shows their lines alone (not the whole month).
    days = [f"summary:{session_id(d)}" for d in range(19, 15, -1)]
    assert sorted(days) == month.meta["stands_for"]
    assert all(f"[{uid}]" in month.text for uid in days)
    assert f"[summary:{session_id(0)}]" not in month.text
    assert layer_ids(result, "recollections")[:1] == ["month:2026-01"]
    assert not set(days) & set(layer_ids(result, "themes"))


async def planner_indexes(root: Path, days: int) -> dict[str, Any]:
    """The planner's first index after `days` days, for a question many sessions match and for
    one none does (the calendar alone); and the month rows, newest first."""
    async with sleep_home(root, settings=sleep_settings()) as rig:
        await build_history(rig, days)
        recaller = rig.memory.recaller
        months = await rig.memory.index.recent(["month"], 100)
        calendar = await top_level(rig.db, months, found=[])
        return {
            "matched": await recaller.planner_lines("what did we decide about the sourdough?"),
            "unmatched": await recaller.planner_lines("who audits the quarterly tax return?"),
            "months": sorted((m.id for m in months), reverse=True),
            "calendar": [e.id for e in calendar],
        }


def ids_of(lines: list[str]) -> list[str]:
    return [line.split(" | ")[0] for line in lines]


async def test_the_planner_index_is_bounded_by_months_not_sessions(tmp_path: Path) -> None:
    with anyio.fail_after(120):
        small = await planner_indexes(tmp_path / "d30", 30)
        large = await planner_indexes(tmp_path / "d400", 400)
    for name in ("matched", "unmatched"):
        (few, few_left), (many, many_left) = small[name], large[name]
        assert few_left == many_left == 0
        tokens = [sum(count_tokens(line) + 1 for line in lines) for lines in (few, many)]
        assert tokens[1] <= 2 * tokens[0], (name, tokens)
        ids = ids_of(many)
        assert len(ids) < 60  # of 400 sessions
        # The recent window (the last 30 days, not folded yet) day by day.
        assert 28 <= len([i for i in ids if i.startswith("summary:")]) <= 31
        months = [i for i in ids if i.startswith("month:")]
        assert len(months) <= RECENT_MONTHS + FOUND_OLD_MONTHS
        # The newest twelve months one line each, whatever was asked; the older ones as their year.
        assert set(large["months"][:RECENT_MONTHS]) <= set(ids)
        assert "year:2026" in ids
    # Without search: the window, the newest twelve months, then the older months' year.
    calendar = large["calendar"]
    assert calendar[-RECENT_MONTHS - 1 : -1] == large["months"][:RECENT_MONTHS]
    assert calendar[-1] == "year:2026" and len(calendar) == 30 + RECENT_MONTHS + 1


async def test_a_picked_year_opens_to_its_months_and_a_month_to_its_sessions(
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        planner = AnthropicModel(
            AnthropicSettings.model_validate(
                {"base_url": fake.url, "max_retries": 0, "timeout_s": 10.0}
            ),
            "sk-test",
        )
        fake.enqueue(
            Planned.reply(json.dumps({"ids": ["year:2026"]})),
            Planned.reply(json.dumps({"ids": ["month:2026-01"]})),
            Planned.reply(json.dumps({"ids": ["summary:d0004-novel"]})),
        )
        with anyio.fail_after(120):
            async with (
                planner,
                sleep_home(
                    tmp_path / "home",
                    settings=sleep_settings(),
                    models={"recall_planner": planner, "recall_synthesis": OfflineModel()},
                ) as rig,
            ):
                await build_history(rig, 400)
                january = await folded_sources(rig, "month:2026-01")
                result = await rig.memory.recaller.recall("which chapter needed a slower opening?")
        prompts = [prompt_text(r.body) for r in fake.message_requests]
    assert len(prompts) == 3
    assert "year:2026" in index_ids(prompts[0])
    assert index_ids(prompts[1]) == ["month:2026-01"]  # the one month of 2026 older than a year
    assert set(index_ids(prompts[2])) == january
    assert [s.session_id for s in result.sources] == ["d0004-novel"]
