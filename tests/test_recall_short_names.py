"""Recall reads a question as memory search does: a name of two letters is what is asked.

After "my partner Jo is allergic to peanuts", `recall "What do you recall about Jo?"` once
answered "No stored memory answers that question" (offline) or from the offline model's own
chatter about recalling, while `memory search "Jo"` ranked the fact first: recall's words
left out anything shorter than three letters and kept the asking ("recall") as content.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from daemon.memory.query import asked_stems
from daemon.memory.recall import coverage, query_stems
from daemon.models.offline import OfflineModel
from tests.memory_support import add_session, memory_system

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("question", "name"),
    [
        ("What do you recall about Jo?", "jo"),
        ("Do you remember what Al does for a living?", "al"),
        ("Tell me about Bo", "bo"),
        ("Li", "li"),
    ],
)
def test_a_two_letter_name_is_asked_and_the_asking_is_not(question: str, name: str) -> None:
    asked = asked_stems(question)
    assert name in asked
    assert not asked & {"recall", "remember", "tell", "what", "do", "you"}
    assert query_stems(question) == set(asked)
    assert coverage(query_stems(question), f"my partner {name.title()} is allergic") > 0


def offline_models() -> dict[str, OfflineModel]:
    offline = OfflineModel()
    return {"summariser": offline, "recall_planner": offline, "recall_synthesis": offline}


@pytest.mark.parametrize(
    ("fact", "question", "answer"),
    [
        ("my partner Jo is allergic to peanuts", "What do you recall about Jo?", "peanuts"),
        ("my partner Jo is allergic to peanuts", "Jo", "peanuts"),
        ("my neighbour Al plays the cello on Sundays", "What about Al?", "cello"),
        ("Ty from the climbing gym moved to Oslo", "do you remember Ty?", "Oslo"),
    ],
)
async def test_offline_recall_answers_a_question_about_a_two_letter_name(
    tmp_path: Path, fact: str, question: str, answer: str
) -> None:
    async with memory_system(tmp_path, models=offline_models()) as memory:
        await memory.remember(fact)
        await memory.remember("The boiler service is booked for next Tuesday")
        with anyio.fail_after(10):
            result = await memory.recall_result(question)
    assert result.synthesised
    assert answer in result.answer and "No stored memory answers" not in result.answer
    assert "boiler" not in result.answer


async def test_offline_recall_is_not_answered_by_chatter_about_recalling(tmp_path: Path) -> None:
    async with memory_system(tmp_path, models=offline_models()) as memory:
        await add_session(
            memory.db,
            "chat",
            [
                ("user", "Remember that my partner Jo is allergic to peanuts."),
                ("assistant", "Noted. I can recall it whenever you ask me to recall something."),
                ("user", "Thanks, what else can you recall?"),
                ("assistant", "I recall what you tell me; ask me to recall anything."),
            ],
        )
        await memory.index_session("chat")
        await memory.index.flush()
        with anyio.fail_after(10):
            result = await memory.recall_result("What do you recall about Jo?")
    assert "allergic to peanuts" in result.answer
    assert "ask me to recall" not in result.answer, result.answer
