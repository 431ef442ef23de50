"""The shipped personality matrix against everyday talk: phrases match as phrases.

Everyday messages must load no topic (a trigger such as "burned out" or "can't cope" must not
shrink to "burned" or "cop"); domain messages must load the right one. Checked through the
router over the shipped matrix and once through `reverie context --prompt`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from daemon.paths import Home
from daemon.settings import Settings
from daemon.topics.matrix import forms, parse_matrix, phrase_words
from daemon.topics.router import TopicRouter

EVERYDAY = [
    "how was work today?",
    "I burned the toast",
    "a cop stopped me",
    "I lost my phone's memory card",
    "I went to the library to return a book",
    "my heart is broken",
    "I tripped on the stairs",
    "we watched a film with a great plot",
    "I'll email you later",
    "what a goal in the match last night",
    "I read the paper this morning",
    "the source of the river is in the mountains",
    "what a pain this form is",
    "we hung out at the park",
    "the roof leaked again",
    "I saw a car crash on the way home",
    "the kids have a class party",
    "I study French on Tuesdays",
    "my error, I meant Thursday",
    "can you explain why the shop closed?",
    "we had cod for dinner",
    "my cat knocked over the plant",
    "the weather is lovely today",
    "the train was late again",
    "I got a parking ticket",
    "my sister called me",
]

DOMAIN = [
    ("my code throws an exception when I run it", "debugging"),
    ("the python script crashes with a traceback", "debugging"),
    ("the build fails with a segfault", "debugging"),
    ("I keep getting an error message from the API", "debugging"),
    ("which library should I use for parsing dates in Python?", "software-engineering"),
    ("let's write a unit test for the parser", "software-engineering"),
    ("I'm so stressed about my exams", "wellbeing"),
    ("I can't cope anymore", "wellbeing"),
    ("I feel burned out at work", "wellbeing"),
    ("how should I invest my savings?", "money"),
    ("what's a good recipe for banana bread?", "cooking"),
    ("I booked a flight to Lisbon", "travel"),
    ("help me plan a trip to Japan", "travel"),
    ("can you proofread my cover letter?", "writing"),
    ("my doctor changed my medication dose", "health"),
    ("I have a terrible headache and a fever", "health"),
    ("someone phished my password", "security"),
    ("is it worth the trade-off?", "decisions"),
    ("how's your memory these days?", "dreams-and-reflection"),
    ("I had a nightmare about falling", "dreams-and-reflection"),
    ("what does this scatter plot tell me about the correlation?", "data-analysis"),
    ("I had an argument with my girlfriend", "relationships"),
    ("help me understand recursion", "learning"),
    ("is there a study with evidence for that claim?", "research"),
]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> TopicRouter:
    home = Home(tmp_path_factory.mktemp("home"))
    home.ensure()
    router = TopicRouter(home, Settings().topics)
    assert router.problems == ()
    return router


@pytest.mark.parametrize("prompt", EVERYDAY)
def test_everyday_messages_load_no_topic(router: TopicRouter, prompt: str) -> None:
    assert [(s.id, s.matched) for s in router.score("system_prompt", prompt)] == []


def test_the_offline_models_own_reply_loads_no_topic(router: TopicRouter) -> None:
    # The assembler routes on the prompt and the previous reply; with no key that reply is the
    # offline model's introduction, which must not pull a topic into every turn.
    from daemon.models.offline import _introduce

    reply = _introduce("flood message about kiln glazes")
    assert "ANTHROPIC_API_KEY" in reply
    assert [(s.id, s.matched) for s in router.score("system_prompt", reply)] == []


def test_an_identifiers_parts_are_not_words_but_the_words_still_are(router: TopicRouter) -> None:
    assert not [
        s for s in router.score("system_prompt", "set ANTHROPIC_API_KEY") if "api" in s.matched
    ]
    assert [
        s for s in router.score("system_prompt", "the API returns 500 on every call") if s.matched
    ]


@pytest.mark.parametrize(("prompt", "topic"), DOMAIN)
def test_domain_messages_load_their_topic(router: TopicRouter, prompt: str, topic: str) -> None:
    chosen = [s.id for s in router.select("system_prompt", prompt)]
    assert topic in chosen, [(s.id, s.matched) for s in router.score("system_prompt", prompt)]


def test_a_phrase_never_collapses_to_one_of_its_words(tmp_path: Path) -> None:
    front = {
        "topics": [
            {
                "id": "w",
                "file": "w.md",
                "triggers": ["can't cope", "burned out", "your memory", "doesn't work"],
            }
        ]
    }
    matrix = parse_matrix(f"---\n{json.dumps(front)}\n---\n", path=tmp_path / "m.md")
    [spec] = matrix.topics

    def hits(text: str) -> list[str]:
        words = phrase_words(text)
        return [t.text for t in spec.triggers if t.matches(words, frozenset(words))]

    assert hits("I just can't cope, I'm burned out and my code doesn't work") == [
        "can't cope",
        "burned out",
        "doesn't work",
    ]
    assert hits("a cop burned the toast; the memory card does not work") == []
    assert hits("how is your memory?") == ["your memory"]


def test_inflected_forms_come_from_the_trigger_as_written() -> None:
    assert {"cope", "copes", "coped", "coping"} <= forms("cope") and "cop" not in forms("cope")
    assert {"code", "coding", "coded"} <= forms("code") and "cod" not in forms("code")
    assert {"dream", "dreams", "dreaming", "dreamed"} <= forms("dream")
    assert {"study", "studies", "studied"} <= forms("study")
    assert {"stop", "stopped", "stopping"} <= forms("stop")
    assert {"fail", "failed", "fails"} <= forms("failing")  # an inflected trigger covers its root


@pytest.fixture
def cli_logging() -> object:
    yield None
    structlog.reset_defaults()


@pytest.mark.usefixtures("cli_logging")
def test_reverie_context_prompt_shows_no_topic_for_everyday_talk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.cli import main

    monkeypatch.setenv("REVERIE_EMBEDDER", "none")
    home = tmp_path / "home"
    for prompt, chosen in (
        ("how was work today?", []),
        ("I burned the toast", []),
        ("I feel burned out and can't cope", ["wellbeing"]),
    ):
        assert main(["context", "--home", str(home), "--prompt", prompt, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["topics"]["chosen"] == chosen, prompt
