"""Facts in use: recall counts uses, stale facts weigh less (never deleted), used facts are promoted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from daemon.events import TurnFinished
from daemon.memory.mining import MinedFact
from daemon.sleep.changes import list_changes
from daemon.sleep.dreams import DreamsPhase
from daemon.sleep.mine import MiningPhase
from daemon.testing import ScriptedModel
from tests.sleep_phase_support import START, SleepRig, sleep_home, sleep_settings

pytestmark = pytest.mark.anyio


async def facts_recalled(rig: SleepRig, question: str) -> list[str]:
    return [i.id for i in await rig.memory.view.auto_recall(question) if i.id.startswith("fact:")]


async def uses_of(rig: SleepRig, uid: str) -> tuple[int, str | None]:
    row = await rig.db.fetchone("SELECT uses, last_used FROM memories WHERE uid = ?", (uid,))
    return int(row[0]), row[1]


async def test_recall_counts_uses_after_the_turn_and_stale_facts_fall_behind(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            first = (await rig.memory.remember("my gym is called FitLife")).id
            second = (await rig.memory.remember("my gym opens at six")).id
            rig.clock.set(START + timedelta(days=100))  # both stale now (stale_after_days 60)
            baseline = await facts_recalled(rig, "anything new about my gym?")
            assert set(baseline[:2]) == {first, second}
            lagging = baseline[1]
            # Shown, but nothing is written during the turn: the write waits for its end.
            assert await uses_of(rig, lagging) == (0, None)
            await rig.bus.publish(TurnFinished(session_id="s", turn_id="t", stop_reason="end_turn"))
            with anyio.fail_after(10):
                while (await uses_of(rig, lagging))[0] == 0:
                    await anyio.sleep(0.01)
            # Both were shown once, so both are fresh again; a month later only one is used.
            rig.clock.set(START + timedelta(days=170))
            rig.memory.index.uses.note_ids([lagging])
            await rig.memory.index.uses.flush()
            assert await uses_of(rig, lagging) == (
                2,
                (START + timedelta(days=170)).isoformat(timespec="microseconds"),
            )
            reordered = await facts_recalled(rig, "anything new about my gym?")
            assert reordered[:2] == [lagging, baseline[0]]
            # Stale is not gone: both facts are active and still recalled.
            assert all(rig.memory.facts.get(uid).active for uid in (first, second))


async def test_a_fact_said_again_is_not_stale(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            await rig.add_session(
                "d1",
                [("user", "My gym is called FitLife."), ("user", "My gym is open until ten.")],
                started=START,
            )
            await MiningPhase().run(rig.context())
            rig.clock.set(START + timedelta(days=30))  # both fresh: the order by relevance
            baseline = await facts_recalled(rig, "tell me about my gym")
            rig.clock.set(START + timedelta(days=100))  # both stale: shown last 70 days ago
            lagging = baseline[1]
            fact = rig.memory.facts.get(lagging)
            assert fact is not None
            # Said again (the night's mining finds the same words): confirmed, so not stale.
            outcome = await rig.memory.facts.record_mined(
                MinedFact(text=fact.text, kind="fact", origin="person", session="d2",
                          message_ids=("d2-m0",), said_at=rig.clock.now())
            )  # fmt: skip
            assert (outcome.status, outcome.id) == ("confirmed", lagging)
            reordered = await facts_recalled(rig, "tell me about my gym")
            assert reordered[0] == lagging


async def test_a_mined_fact_in_steady_use_is_promoted_bounded_and_by_whose_word(
    tmp_path: Path,
) -> None:
    settings = sleep_settings(promote_min_uses=3, max_promoted=1)
    with anyio.fail_after(90):
        async with sleep_home(tmp_path / "home", settings=settings) as rig:
            await rig.add_session(
                "d1",
                [("user", "My allergist is Dr Berg."), ("user", "My locker code is 4411.")],
                started=START,
            )
            await rig.add_session(
                "fork-1",
                [("user", "Our deploy window is on Thursday.")],
                started=START,
                kind="fork",
            )
            first = await MiningPhase().run(rig.context(cycle_id="n1"))
            assert first.details["promoted"]["pinned"] == []
            facts = {f.text: f for f in rig.memory.facts.facts() if f.mined}
            allergist = facts["My allergist is Dr Berg."]
            locker = facts["My locker code is 4411."]
            deploy = facts["Our deploy window is on Thursday (2026-01-08)."]
            assert deploy.origin == "agent"  # a fork's brief is the agent's word
            for turn in range(3):
                for question in (
                    "who is my allergist?",
                    "what is my locker code?",
                    "when is the deploy window?",
                ):
                    await rig.memory.view.auto_recall(question)
                await rig.bus.publish(
                    TurnFinished(session_id="s", turn_id=f"t{turn}", stop_reason="end_turn")
                )
            report = await MiningPhase().run(rig.context(cycle_id="n2"))
            promoted = report.details["promoted"]
            # Bounded: one mined fact pinned at a time; the agent's word is proposed instead.
            assert len(promoted["pinned"]) == 1 and promoted["pinned"][0] in {
                allergist.id,
                locker.id,
            }
            assert promoted["proposed"] == [deploy.id]
            pinned = rig.memory.facts.get(promoted["pinned"][0])
            assert pinned is not None and pinned.text in rig.home.facts_file.read_text()
            assert "deploy window" not in rig.home.facts_file.read_text()
            changes = await list_changes(rig.db, "n2")
            assert [(c.kind, c.target) for c in changes] == [("fact_promoted", pinned.id)]


async def test_the_dreams_phase_reviews_the_promotions_of_the_night(tmp_path: Path) -> None:
    dreams = ScriptedModel(script=lambda request: '{"entry": "A quiet night.", "revisions": []}')
    settings = sleep_settings(promote_min_uses=2)
    with anyio.fail_after(60):
        async with sleep_home(
            tmp_path / "home", settings=settings, models={"dreams": dreams}
        ) as rig:
            outcome = await rig.memory.facts.record_mined(
                MinedFact(text="My allergist is Dr Berg.", kind="fact", origin="person",
                          session="d1", message_ids=("d1-m0",), said_at=START)
            )  # fmt: skip
            rig.memory.index.uses.note_ids([outcome.id, outcome.id])
            rig.memory.index.uses.note_ids([outcome.id])
            ctx = rig.context(cycle_id="n1", since=START - timedelta(hours=1))
            mining = await MiningPhase().run(ctx)
            assert mining.details["promoted"]["pinned"] == [outcome.id]
            assert dreams.calls == []  # nothing new to read: the model is not asked to mine
            ctx.earlier["mining"] = mining
            await DreamsPhase().run(ctx)
            [call] = dreams.calls
            prompt = call.messages[-1].text
            assert "Facts promoted tonight into the pinned set" in prompt
            assert f"[{outcome.id}] (person) My allergist is Dr Berg." in prompt
