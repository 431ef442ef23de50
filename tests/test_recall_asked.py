"""Recall does not answer a question with the question: the message a turn is answering (and
any message saying the same words) is left out of what `recall` reads and what automatic
recall brings for that turn.

Through the real daemon and its offline model, whose recall answers quote what they read
("You said: “…”"): the question stored as the turn's first message, and an identical question
asked earlier, must not come back as a memory.
"""

from __future__ import annotations

import re
from pathlib import Path

from daemon.memory.asked import only_asks, said_as
from tests.harness import Client, DaemonProcess, daemon_env, run_cli

QUESTION = "What do you recall about my favourite tea?"


def test_a_recall_answer_never_quotes_the_question_being_asked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            _, frames = c.chat("My favourite tea is earl grey, a strong pot every morning.")
            assert frames[-1]["type"] == "done", frames[-1]
            replies = []
            # The second time the question is also an earlier message of the session: an
            # exact duplicate, left out as well (case and closing punctuation aside).
            for asked in (QUESTION, QUESTION.lower().rstrip("?") + " ?"):
                _, frames = c.chat(asked)
                assert frames[-1]["type"] == "done", frames[-1]
                replies.append(frames[-1]["text"])
        for reply in replies:
            assert "earl grey" in reply.lower(), reply  # recall answered from memory
            assert not re.search(r"what do you recall about my favourite tea", reply, re.I), reply
        # Automatic recall for the same words: the earlier identical questions are no memory
        # to bring (the person's statement is).
        shown = run_cli("context", "--prompt", QUESTION, "--text", "--home", str(home), timeout=60)
        assert shown.returncode == 0, shown.stderr
        recalled = shown.stdout.partition("## Recalled for this message")[2]
        assert "earl grey" in recalled.lower(), shown.stdout
        assert not re.search(r"what do you recall about my favourite tea", recalled, re.I), recalled
    finally:
        assert d.stop() == 0


def test_only_the_same_words_are_the_question() -> None:
    assert said_as("  What do you recall\nabout my TEA?! ") == "what do you recall about my tea"
    assert only_asks(
        "user (28 November 2026): what do you recall about my tea",
        "What do you recall about my tea?",
    )
    assert only_asks("What do you recall about my tea?\n\n", "what do you recall about my tea")
    # A message that says more, or another question, is a memory like any other.
    assert not only_asks(
        "user (28 November 2026): what do you recall about my tea and cake?",
        "What do you recall about my tea?",
    )
    assert not only_asks(
        "user: what do you recall about my tea?\nassistant: earl grey",
        "What do you recall about my tea?",
    )
    assert not only_asks("anything", "")
