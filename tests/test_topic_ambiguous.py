"""Ambiguous triggers: one everyday word never loads a domain on its own.

"What is the locker code for project pelican?" once loaded the software topic on "code".
The matrix lists such words under `ambiguous` with their sense cues; the router counts one
only next to a cue or a second trigger of the same topic. Checked on a small matrix (the
rule), on the shipped matrix (the words it lists) and through `reverie context --prompt`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from daemon.paths import Home
from daemon.settings import Settings
from daemon.topics.matrix import parse_matrix
from daemon.topics.router import TopicRouter

# Each ambiguous word of the shipped matrix, said in its everyday sense.
OTHER_SENSE = [
    "What is the locker code for project pelican?",
    "the dress code for the wedding is black tie",
    "a python escaped from the zoo",
    "there is rust on my bike chain",
    "the architecture of the old cathedral is stunning",
    "the function at the town hall starts at eight",
    "a bug bit me on the arm",
    "she made an exception to the rule for me",
    "the kids needed a timeout after lunch",
    "the pastry was flaky and warm",
    "my dream job would be running a bakery",
    "of course I'll come to the party",
    "it was an average day",
    "the security guard at the mall waved",
    "we ordered a draft beer",
    "he had an identity crisis in his twenties",
    "I need to edit the photos from the party",
    "what's my code for the gym locker",
]

# The same words in their domain sense, with the topic they load.
DOMAIN_SENSE = [
    ("the code won't compile", "software-engineering"),
    ("can you look at my code?", "software-engineering"),
    ("my code doesn't do what I expect", "software-engineering"),
    ("my python script can't import the module", "software-engineering"),
    ("I found a bug in the app", "debugging"),
    ("my code throws an exception when I run it", "debugging"),
    ("the request hits a timeout on the server", "debugging"),
    ("I had a dream last night about the sea", "dreams-and-reflection"),
    ("I dreamt of my grandmother, it was a strange dream", "dreams-and-reflection"),
    ("I'm taking an online course in statistics", "learning"),
    ("can you help me edit this essay", "writing"),
    ("we had an argument and my dad got angry", "relationships"),
    ("what is the average of these values?", "data-analysis"),
]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> TopicRouter:
    home = Home(tmp_path_factory.mktemp("home"))
    home.ensure()
    router = TopicRouter(home, Settings().topics)
    assert router.problems == ()
    return router


def small_router(tmp_path: Path, topic: dict[str, object]) -> TopicRouter:
    (tmp_path / "topics").mkdir(exist_ok=True)
    (tmp_path / "topics" / "t.md").write_text("# T\n\nThink about it.\n", encoding="utf-8")
    front = {"topics": [{"id": "t", "file": "topics/t.md", **topic}]}
    (tmp_path / "PERSONALITY_MATRIX.md").write_text(
        f"---\n{json.dumps(front)}\n---\n", encoding="utf-8"
    )
    settings = Settings().topics.model_copy(
        update={"matrix": str(tmp_path / "PERSONALITY_MATRIX.md")}
    )
    return TopicRouter(Home(tmp_path / "home"), settings)


def matched(router: TopicRouter, text: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.id, s.matched) for s in router.score("system_prompt", text)]


def test_an_ambiguous_trigger_needs_a_sense_cue_or_a_second_trigger(tmp_path: Path) -> None:
    router = small_router(
        tmp_path,
        {"triggers": ["code", "compile", "python"], "ambiguous": {"code": ["script", "repo"]}},
    )
    assert router.problems == ()
    assert matched(router, "What is the locker code for project pelican?") == []
    assert matched(router, "the code in this script") == [("t", ("code",))]
    assert matched(router, "push the code to the repo") == [("t", ("code",))]
    assert matched(router, "the code won't compile") == [("t", ("code", "compile"))]
    # An unambiguous trigger still loads alone.
    assert matched(router, "I wrote it in python") == [("t", ("python",))]


def test_two_ambiguous_triggers_of_one_topic_support_each_other(tmp_path: Path) -> None:
    router = small_router(
        tmp_path, {"triggers": ["bug", "exception"], "ambiguous": {"bug": [], "exception": []}}
    )
    assert matched(router, "a bug bit me") == []
    assert matched(router, "an exception to the rule") == []
    assert matched(router, "this bug raises an exception") == [("t", ("bug", "exception"))]


def test_an_ambiguous_word_that_is_not_a_trigger_is_reported(tmp_path: Path) -> None:
    front = {"topics": [{"id": "t", "file": "t.md", "triggers": ["bug"], "ambiguous": {"bag": []}}]}
    matrix = parse_matrix(f"---\n{json.dumps(front)}\n---\n", path=tmp_path / "m.md")
    assert matrix.topics == ()
    assert matrix.problems == (
        "m.md: topic 't': ambiguous word 'bag' is not one of the topic's triggers",
    )


@pytest.mark.parametrize("prompt", OTHER_SENSE)
def test_shipped_ambiguous_words_in_their_everyday_sense_load_nothing(
    shipped: TopicRouter, prompt: str
) -> None:
    assert matched(shipped, prompt) == []


@pytest.mark.parametrize(("prompt", "topic"), DOMAIN_SENSE)
def test_shipped_ambiguous_words_in_their_domain_sense_load_the_topic(
    shipped: TopicRouter, prompt: str, topic: str
) -> None:
    chosen = [s.id for s in shipped.select("system_prompt", prompt)]
    assert topic in chosen, matched(shipped, prompt)


@pytest.fixture
def cli_logging() -> object:
    yield None
    structlog.reset_defaults()


@pytest.mark.usefixtures("cli_logging")
def test_reverie_context_does_not_load_software_for_a_locker_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.cli import main

    monkeypatch.setenv("REVERIE_EMBEDDER", "none")
    home = tmp_path / "home"
    for prompt, chosen in (
        ("What is the locker code for project pelican?", []),
        ("the code won't compile", ["software-engineering"]),
    ):
        assert main(["context", "--home", str(home), "--prompt", prompt, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["topics"]["chosen"] == chosen, prompt
