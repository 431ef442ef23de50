"""The topic router: tokenising, scoring, thresholds per point, persistence, bad matrices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from daemon.paths import Home
from daemon.settings import TopicPoint, TopicsSettings
from daemon.topics.matrix import MatrixError, parse_matrix, tokenise
from daemon.topics.router import ADDENDA_HEADING, TopicRouter


@pytest.fixture(autouse=True)
def _default_logging() -> None:
    """Log to the current stdout: a CLI test elsewhere may have left logging on a closed capture."""
    structlog.reset_defaults()


def write_matrix(
    root: Path, topics: list[dict[str, object]], *, bodies: dict[str, str] | None = None
) -> Home:
    home = Home(root)
    (root / "topics").mkdir(parents=True, exist_ok=True)
    front = json.dumps({"topics": topics}, indent=1)
    home.matrix_file.write_text(f"---\n{front}\n---\n# prose\n")
    for tid, body in (bodies or {}).items():
        (root / "topics" / f"{tid}.md").write_text(body)
    return home


def topic(
    tid: str, triggers: list[str], priority: float = 0, scope: object = "all"
) -> dict[str, object]:
    return {
        "id": tid,
        "file": f"topics/{tid}.md",
        "triggers": triggers,
        "priority": priority,
        "scope": scope,
    }


@pytest.fixture
def small(tmp_path: Path) -> Home:
    return write_matrix(
        tmp_path,
        [
            topic("debugging", ["bug", "stack trace", "crash"], priority=2),
            topic("cooking", ["recipe", "bake", "oven"], priority=1),
            topic("dreams", ["dream", "nightmare"], priority=4),
            topic("money", ["budget", "tax"], priority=0, scope=["system_prompt"]),
        ],
        bodies={
            "debugging": "# Debugging\n\nReproduce first.\n",
            "cooking": "# Cooking\n\nTaste as you go.\n",
            "dreams": "# Dreams\n\nListen for meaning.\n",
            "money": "# Money\n\nShow the arithmetic.\n",
        },
    )


def test_tokenise_lowercases_drops_stop_words_and_folds_inflections() -> None:
    assert tokenise("The Dreams I was dreaming, and what I dreamed!") == ["dream", "dream", "dream"]
    assert tokenise("Debugging bugs in the studies") == ["debug", "bug", "study"]
    assert tokenise("of the and to is") == []


def test_score_is_overlap_plus_half_priority(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    scores = {
        s.id: s for s in router.score("system_prompt", "a crash with a stack trace, such a bug")
    }
    assert set(scores) == {"debugging"}
    assert scores["debugging"].overlap == 3
    assert scores["debugging"].score == 3 + 2 * 0.5
    assert scores["debugging"].matched == ("bug", "stack trace", "crash")


def test_phrase_trigger_matches_as_a_phrase(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    assert [s.id for s in router.score("system_prompt", "two stack traces in the log")] == [
        "debugging"
    ]
    assert (
        router.score("system_prompt", "the trace of a stack") == []
    )  # its words, but not the phrase
    assert router.score("system_prompt", "a stack of pancakes") == []


def test_zero_overlap_is_never_selected_whatever_the_priority(small: Home) -> None:
    # dreams has priority 4: 4 × 0.5 = 2 ≥ every min score, yet nothing in the query matches.
    router = TopicRouter(small, TopicsSettings())
    for point in ("system_prompt", "recall_persona", "summary_persona"):
        assert router.select(point, "What's a good sandwich for lunch?") == []
    assert router.addenda("system_prompt", "What's a good sandwich for lunch?") == ""


def test_sandwich_loads_nothing_from_the_shipped_matrix(home_dir: Path) -> None:
    router = TopicRouter(Home(home_dir), TopicsSettings())
    assert len(router.topics) >= 12 and router.problems == ()
    assert (
        router.select("system_prompt", "What's your favourite sandwich? I like ham and cheese.")
        == []
    )
    chosen = [
        s.id
        for s in router.select(
            "system_prompt", "My python code crashes with a traceback, help me debug it"
        )
    ]
    assert chosen[0] == "debugging"


def test_min_score_per_point_and_top_n(small: Home) -> None:
    settings = TopicsSettings(
        system_prompt=TopicPoint(top_n=2, min_score=1),
        summary_persona=TopicPoint(top_n=2, min_score=2),
    )
    router = TopicRouter(small, settings)
    text = "a bug in the oven recipe, dreaming of budgets"
    # debugging 1+1=2, cooking 2+0.5=2.5, dreams 1+2=3, money 1+0=1
    assert [s.id for s in router.score("system_prompt", text)] == [
        "dreams",
        "cooking",
        "debugging",
        "money",
    ]
    assert [s.id for s in router.select("system_prompt", text)] == ["dreams", "cooking"]
    # money is scoped to the system prompt only, and 1 < 2 anyway
    assert [s.id for s in router.score("summary_persona", text)] == [
        "dreams",
        "cooking",
        "debugging",
    ]
    only_money = router.select("summary_persona", "my budget")
    assert only_money == []
    assert [s.id for s in router.select("system_prompt", "my budget")] == ["money"]


def test_scope_limits_points(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    assert router.select("recall_persona", "tax budget") == []
    assert [s.id for s in router.select("system_prompt", "tax budget")] == ["money"]


def test_explain_gives_reasons_for_the_unchosen(small: Home) -> None:
    settings = TopicsSettings(system_prompt=TopicPoint(top_n=1, min_score=1.5))
    router = TopicRouter(small, settings)
    rows = {s.id: s for s in router.explain("system_prompt", "bug recipe oven budget")}
    assert rows["cooking"].selected and rows["cooking"].reason == "matched"
    assert not rows["debugging"].selected and rows["debugging"].reason == "outside top 1"
    assert not rows["money"].selected and rows["money"].reason.startswith("below min score")


def test_addenda_injects_only_bodies_under_heading(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    text = router.addenda("system_prompt", "the cake recipe needs a hotter oven")
    assert text == f"{ADDENDA_HEADING}\n\n### Cooking\n\nTaste as you go."
    assert "triggers" not in text and "recipe" not in text


def test_chosen_topic_persists_for_configured_turns_per_session(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings(persist_turns=2))
    first = router.select("system_prompt", "there is a bug", session_key="s1")
    assert [(s.id, s.persisted) for s in first] == [("debugging", False)]
    second = router.select("system_prompt", "ok, and now?", session_key="s1")
    assert [(s.id, s.persisted, s.turns_left) for s in second] == [("debugging", True, 1)]
    third = router.select("system_prompt", "go on", session_key="s1")
    assert [(s.id, s.persisted, s.turns_left) for s in third] == [("debugging", True, 0)]
    assert router.select("system_prompt", "and then?", session_key="s1") == []
    # Other sessions and key-less calls have no memory of s1.
    assert router.select("system_prompt", "ok, and now?", session_key="s2") == []
    assert router.select("system_prompt", "ok, and now?") == []


def test_fresh_match_resets_persistence_and_fills_before_lingering(small: Home) -> None:
    settings = TopicsSettings(persist_turns=3, system_prompt=TopicPoint(top_n=1, min_score=1))
    router = TopicRouter(small, settings)
    router.select("system_prompt", "bug", session_key="s")
    turn2 = router.select("system_prompt", "a recipe", session_key="s")
    assert [s.id for s in turn2] == ["cooking"]  # fresh wins the single slot
    turn3 = router.select("system_prompt", "hmm", session_key="s")
    assert [s.id for s in turn3] == ["cooking"]  # cooking has more turns left than debugging
    router.forget("s")
    assert router.select("system_prompt", "hmm", session_key="s") == []


def test_malformed_matrix_keeps_last_good_and_reports(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    assert len(router.topics) == 4
    small.matrix_file.write_text('---\n{"topics": [ {"id": "x", }\n---\n')
    problems = router.reload()
    assert (
        len(problems) == 1
        and "not valid JSON" in problems[0]
        and "keeping the last good matrix" in problems[0]
    )
    assert [s.id for s in router.select("system_prompt", "bug")] == ["debugging"]


def test_malformed_matrix_at_start_leaves_router_empty_but_working(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.matrix_file.write_text("no front matter here\n")
    router = TopicRouter(home, TopicsSettings())
    assert router.topics == []
    assert "no front matter" in router.problems[0]
    assert router.addenda("system_prompt", "bug") == ""


def test_missing_topic_file_is_reported_and_the_rest_work(small: Home) -> None:
    (small.topics_dir / "cooking.md").unlink()
    router = TopicRouter(small, TopicsSettings())
    assert [t.id for t in router.topics] == ["debugging", "dreams", "money"]
    assert any("cooking" in p and "does not exist" in p and "skipped" in p for p in router.problems)
    assert [s.id for s in router.select("system_prompt", "bug")] == ["debugging"]


def test_topic_file_deleted_after_load_keeps_last_good_body(small: Home) -> None:
    router = TopicRouter(small, TopicsSettings())
    router.reload()
    (small.topics_dir / "cooking.md").unlink()
    problems = router.reload()
    assert any("keeping its last good body" in p for p in problems)
    assert "Taste as you go." in router.addenda("system_prompt", "recipe")


def test_bad_topic_entries_are_skipped_with_clear_problems(tmp_path: Path) -> None:
    home = write_matrix(
        tmp_path,
        [
            topic("ok", ["fine"]),
            {"id": "Bad Id", "file": "topics/x.md", "triggers": ["x"]},
            topic("noscope", ["y"], scope=["everywhere"]),
            topic("stopwords", ["the and"]),
            {"id": "escape", "file": "../etc/passwd", "triggers": ["z"]},
            topic("ok", ["twice"]),
            {"id": "prio", "file": "topics/prio.md", "triggers": ["p"], "priority": 99},
        ],
        bodies={"ok": "# OK\n\nbody\n"},
    )
    router = TopicRouter(home, TopicsSettings())
    assert [t.id for t in router.topics] == ["ok"]
    text = "\n".join(router.problems)
    for fragment in (
        "'id' must be",
        "unknown scope",
        "only stop words",
        "must stay inside",
        "declared twice",
        "'priority' must be",
    ):
        assert fragment in text


def test_parse_matrix_errors_are_actionable() -> None:
    with pytest.raises(MatrixError, match="not closed"):
        parse_matrix("---\n{}\n", path=Path("M.md"))
    with pytest.raises(MatrixError, match='"topics" list'):
        parse_matrix('---\n{"x": 1}\n---\n', path=Path("M.md"))


def test_unknown_point_is_an_error(small: Home) -> None:
    with pytest.raises(ValueError, match="unknown injection point"):
        TopicRouter(small, TopicsSettings()).select("elsewhere", "bug")
