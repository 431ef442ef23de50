"""bench.years without a daemon: its life generator and its scorer (fast)."""

from __future__ import annotations

from datetime import date
from typing import Any

from bench.years import KINDS, NEUTRAL, Fact, Life, generate, score, targets


def _ctx(*texts: str) -> dict[str, Any]:
    return {"blocks": [{"layer": "memory", "text": t} for t in texts], "total_tokens": 10}


def _life(*facts: Fact) -> Life:
    return Life(7, 100, date(2027, 1, 1), [1], set(), set(), set(), list(facts), [], [(1, 30)])


def test_the_life_spans_years_with_every_kind_told_in_other_words_than_asked() -> None:
    life = generate(11, 1100)
    assert life == generate(11, 1100)  # seeded
    assert generate(12, 1100).facts != life.facts
    assert life.talk_days[-1] >= 1000 and len(life.talk_days) >= 60
    gaps = [b - a for a, b in zip(life.talk_days, life.talk_days[1:], strict=False)]
    assert max(gaps) >= 14  # weeks with the daemon off
    assert [m for m, _ in life.checkpoints] == [1, 6, 12, 24, 36]
    assert {f.kind for f in life.facts} == set(KINDS)
    for fact in life.facts:
        told = " ".join(e.text for e in life.events if e.fact == fact.fid).lower()
        assert told and fact.question.lower() not in told
    plans = [f for f in life.facts if f.kind == "plan" and len(f.timeline) > 1]
    assert plans and all(
        b[0] - a[0] >= 60 for f in plans for a, b in zip(f.timeline, f.timeline[1:], strict=False)
    )
    # People are named once: no later event says the name again.
    for fact in (f for f in life.facts if f.kind == "person"):
        name = fact.timeline[0][1]
        assert sum(name in e.text for e in life.events) == 1


def test_a_changed_plan_scores_its_current_value_and_counts_an_old_one_alone() -> None:
    plan = Fact(
        "plan-x", "plan", ("holiday",), "where are we going?", [(1, "Crete"), (40, "Lofoten")]
    )
    life = _life(plan)
    # Before the change Crete is current; after it, Crete alone is stale.
    before = score(life, 30, {NEUTRAL: _ctx("The holiday will be Crete."), plan.question: _ctx("")})
    assert before["held"]["held"] == 1 and before["superseded_alone"] == 0
    stale = {NEUTRAL: _ctx("The holiday will be Crete."), plan.question: _ctx("nothing")}
    after = score(life, 60, stale)
    assert after["held"]["held"] == 0 and after["superseded_alone"] == 1
    assert after["rows"][0]["expected"] == "Lofoten"
    both = {
        NEUTRAL: _ctx("nothing"),
        plan.question: _ctx("The holiday moved from Crete to Lofoten."),
    }
    good = score(life, 60, both)
    assert good["held"]["held"] == 1 and good["superseded_alone"] == 0
    # A value without its anchor in the same sentence is not shown.
    loose = score(
        life,
        60,
        {NEUTRAL: _ctx("Lofoten is pretty."), plan.question: _ctx("We talked about the holiday.")},
    )
    assert loose["held"]["held"] == 0


def test_two_hop_needs_the_relation_and_the_property_in_one_context() -> None:
    fact = Fact(
        "two_hop-0",
        "two_hop",
        ("Greta",),
        "what does my aunt do?",
        [(20, "vet")],
        name="Greta",
        relation="aunt",
        bridge_day=5,
    )
    life = _life(fact)
    half = score(
        life,
        30,
        {NEUTRAL: _ctx("My aunt Greta visited."), fact.question: _ctx("Greta works as a vet.")},
    )
    assert half["held"]["held"] == 0
    whole = {NEUTRAL: _ctx(""), fact.question: _ctx("Greta works as a vet.", "Greta is my aunt.")}
    assert score(life, 30, whole)["by_kind"]["two_hop"] == {"held": 1, "of": 1, "share": 1.0}
    assert score(life, 10, whole)["held"]["of"] == 0  # not all of it told yet


def test_targets_fail_on_a_lost_fact_and_on_a_stale_value() -> None:
    def cp(month: int, share: float, stale: int, wall: float, calls: float) -> dict[str, Any]:
        return {
            "month": month,
            "held": {"share": share},
            "superseded_alone": stale,
            "first_turn": {"max_tokens": 5000, "budget": 8000},
            "nights": {"wall_s_median": wall, "calls_median": calls},
        }

    ok = targets([cp(12, 1.0, 0, 2.0, 3), cp(36, 0.96, 0, 3.9, 3)])
    assert (
        ok["held_95_every_checkpoint"] and ok["superseded_alone_0"] and ok["nightly_wall_within_2x"]
    )
    bad = targets([cp(12, 1.0, 0, 2.0, 3), cp(36, 0.9, 1, 4.1, 6)])
    assert not bad["held_95_every_checkpoint"] and not bad["superseded_alone_0"]
    assert not bad["nightly_wall_within_2x"] and not bad["calls_flat"]
