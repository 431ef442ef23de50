"""The offline provider: honest chat, memory tool calls, and the extractive memory tasks."""

from __future__ import annotations

import json
import re

import anyio
import pytest

from daemon.models.base import (
    Completed,
    Message,
    ModelRequest,
    ModelResponse,
    StreamEvent,
    SystemBlock,
    Task,
    TextDelta,
    ToolCallStarted,
    ToolResultBlock,
    ToolSpec,
)
from daemon.models.offline import OfflineModel, plan_recall, summarise, synthesise

MEMORY_TOOLS = (
    ToolSpec(name="remember", description="Store a fact.", input_schema={"type": "object"}),
    ToolSpec(name="recall", description="Search memory.", input_schema={"type": "object"}),
)


def request(
    text: str, *, task: Task = "chat", tools: tuple[ToolSpec, ...] = MEMORY_TOOLS
) -> ModelRequest:
    return ModelRequest(
        model="claude-sonnet-4-5", messages=(Message.user(text),), tools=tools, task=task
    )


async def run(req: ModelRequest) -> tuple[list[StreamEvent], ModelResponse]:
    events: list[StreamEvent] = []
    with anyio.fail_after(5):
        async for event in OfflineModel().stream(req):
            events.append(event)
    assert isinstance(events[-1], Completed)
    return events, events[-1].response


@pytest.mark.anyio
async def test_chat_reply_is_honest_and_streamed_word_by_word() -> None:
    events, response = await run(request("How are you today?"))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 20 and "".join(deltas) == response.text
    assert "offline model" in response.text
    assert "ANTHROPIC_API_KEY" in response.text
    assert "How are you today?" in response.text
    assert "Claude" not in response.text.replace("ANTHROPIC_API_KEY", "")
    assert response.model == "offline" and response.provider == "offline"
    assert response.stop_reason == "end_turn"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.cache_read_tokens == response.usage.cache_write_tokens == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("said", "arguments"),
    [
        ("Remember that the dentist is on Friday.", {"text": "the dentist is on Friday"}),
        (
            "please remember the spare key is under the blue pot",
            {"text": "the spare key is under the blue pot"},
        ),
        (
            "Note that the car needs an MOT in March, thanks!",
            {"text": "the car needs an MOT in March"},
        ),
        ("Don't forget Ana's flight lands at 6pm", {"text": "Ana's flight lands at 6pm"}),
        ("Remember that my name is Sam.", {"text": "my name is Sam", "target": "profile"}),
        ("OK. Remember that I live in Leeds", {"text": "I live in Leeds", "target": "profile"}),
        (
            "please remember I prefer tea to coffee",
            {"text": "I prefer tea to coffee", "target": "profile"},
        ),
        (
            "Remember that I am allergic to penicillin",
            {"text": "I am allergic to penicillin", "target": "profile"},
        ),
    ],
)
async def test_remember_requests_call_the_remember_tool(
    said: str, arguments: dict[str, str]
) -> None:
    events, response = await run(request(said))
    (call,) = response.tool_calls
    assert (call.name, call.input) == ("remember", arguments)
    assert response.stop_reason == "tool_use"
    assert ToolCallStarted(id=call.id, name="remember") in events


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("said", "query"),
    [
        ("What do you recall about the garden?", "the garden"),
        ("Do you remember Berlin", "Berlin"),
        ("what did we decide about the roof repair?", "the roof repair"),
        ("What do you know about my sister's wedding?", "my sister's wedding"),
    ],
)
async def test_recall_questions_call_the_recall_tool(said: str, query: str) -> None:
    _, response = await run(request(said))
    (call,) = response.tool_calls
    assert (call.name, call.input) == ("recall", {"query": query})


@pytest.mark.anyio
async def test_no_tool_call_when_the_tool_is_not_offered_or_not_asked_for() -> None:
    _, response = await run(request("remember that the bins go out on Tuesday", tools=()))
    assert not response.tool_calls
    assert "could not store" in response.text and "the bins go out on Tuesday" in response.text
    _, response = await run(request("I remember that summer fondly"))
    assert not response.tool_calls
    _, response = await run(request("what do you recall about Lisbon?", tools=MEMORY_TOOLS[:1]))
    assert not response.tool_calls and "offline model" in response.text


@pytest.mark.anyio
async def test_answers_from_tool_results_without_calling_again() -> None:
    _, first = await run(request("what do you recall about the garden?"))
    (call,) = first.tool_calls
    follow_up = ModelRequest(
        model="m",
        tools=MEMORY_TOOLS,
        messages=(
            Message.user("what do you recall about the garden?"),
            Message(role="assistant", content=first.content),
            Message(
                role="user",
                content=(
                    ToolResultBlock(
                        tool_use_id=call.id,
                        content="Tomatoes go in the raised beds [fact:3]" + " x" * 1000,
                    ),
                ),
            ),
        ),
    )
    _, response = await run(follow_up)
    assert not response.tool_calls and response.stop_reason == "end_turn"
    assert response.text.startswith(
        "The recall tool returned: Tomatoes go in the raised beds [fact:3]"
    )
    assert len(response.text) < 900  # bounded, however long the tool output
    failed = ModelRequest(
        model="m",
        messages=(
            *follow_up.messages[:2],
            Message(
                role="user",
                content=(
                    ToolResultBlock(
                        tool_use_id=call.id, content="index unavailable", is_error=True
                    ),
                ),
            ),
        ),
    )
    _, response = await run(failed)
    assert "The recall tool reported an error: index unavailable" in response.text


@pytest.mark.anyio
async def test_same_request_gives_the_same_response() -> None:
    req = ModelRequest(
        model="m",
        system=(SystemBlock(text="persona"),),
        messages=(Message.user("remember that Ivy likes owls"),),
        tools=MEMORY_TOOLS,
    )
    _, one = await run(req)
    _, two = await run(req)
    assert one == two


TRANSCRIPT = """Summarise this session (id s1, started 2026-01-01T09:00, 6 messages).
<<<TRANSCRIPT
[user] I want to plan the vegetable garden for spring. Tomatoes need full sun.
[assistant] The raised beds by the fence get the most sun, so tomatoes fit there.
[user] We decided to put tomatoes in the raised beds and basil next to them.
[assistant] Good. I will remind you to buy compost on Saturday.
[user] Also the shed door squeaks.
[assistant] Noted.
TRANSCRIPT>>>"""


@pytest.mark.anyio
async def test_summarise_reply_follows_the_contract() -> None:
    _, response = await run(request(TRANSCRIPT, task="summarise", tools=()))
    data = json.loads(response.text)
    assert set(data) == {"title", "slug", "tags", "summary", "decisions"}
    assert data["title"] == "I want to plan the vegetable garden for spring"
    slug_words = data["slug"].split("-")
    assert 3 <= len(slug_words) <= 6 and re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", data["slug"])
    assert "tomatoes" in slug_words
    assert not {"the", "and", "for", "want", "user", "assistant"} & set(slug_words)
    assert "raised beds" in data["summary"] and "The person:" in data["summary"]
    assert (
        "We decided to put tomatoes in the raised beds and basil next to them." in data["decisions"]
    )
    assert "Good. I will remind you to buy compost on Saturday." not in data["decisions"]
    assert "I will remind you to buy compost on Saturday." in data["decisions"]
    assert "Also the shed door squeaks." not in data["decisions"]


def test_a_sentence_said_again_is_one_line_of_the_summary() -> None:
    """A long day that repeats itself: the summary names each thing once, and the room the
    copies would take goes to what else the day said."""
    again = "[user] The quotes for the windows came back all over the place, frames and sills.\n"
    transcript = (
        "<<<TRANSCRIPT\n"
        + again * 6
        + "[user] Our neighbour Ilse lent us her ladder for the gutters.\n"
        + "[user] The printer jammed again.\nTRANSCRIPT>>>"
    )
    summary = summarise(transcript)["summary"]
    assert summary.count("quotes for the windows") == 1, summary
    assert "ladder" in summary


def test_summarise_pads_a_tiny_session_to_a_three_word_slug() -> None:
    data = summarise("<<<TRANSCRIPT\n[user] hi\nTRANSCRIPT>>>")
    assert len(data["slug"].split("-")) == 3 and data["summary"]


def test_plan_recall_ranks_by_overlap_and_caps_at_five() -> None:
    index = "\n".join(
        [
            "sum:1 | session-2026-01-01_0900__vegetable-garden-spring | tomatoes and basil in raised beds",
            "sum:2 | session-2026-01-02_0900__roof-repair-quote | the roofer came",
            "sum:3 | session-2026-01-03_0900__tomato-sauce | cooking with garden tomatoes",
            *[f"sum:{n} | session__garden-{n} | garden" for n in range(4, 10)],
        ]
    )
    ids = plan_recall(f"QUERY: where do the garden tomatoes go\nINDEX:\n{index}")
    assert ids[:2] == ["sum:1", "sum:3"] and len(ids) == 5 and "sum:2" not in ids
    assert plan_recall(f"QUERY: quantum physics lecture\nINDEX:\n{index}") == []


@pytest.mark.anyio
async def test_plan_recall_reply_is_json() -> None:
    text = "QUERY: roof\nINDEX:\nsum:2 | roof-repair | quote"
    _, response = await run(request(text, task="plan_recall", tools=()))
    assert json.loads(response.text) == {"ids": ["sum:2"]}


def test_synthesise_cites_the_best_sentences() -> None:
    answer = synthesise(
        "QUESTION: where do the tomatoes go?\nSOURCES:\n"
        "[fact:3] (fact, origin explicit, 2026-01-01)\nTomatoes go in the raised beds.\n\n"
        "[session-2026-01-01__garden] (summary, origin system)\nWe talked about the garden. Basil goes next to the tomatoes. The roof leaks."
    )
    assert "Tomatoes go in the raised beds. [fact:3]" in answer
    assert "Basil goes next to the tomatoes. [session-2026-01-01__garden]" in answer
    assert "roof" not in answer and "We talked" not in answer
    nothing = synthesise(
        "QUESTION: what car do I drive?\nSOURCES:\n[fact:3]\nTomatoes go in the raised beds."
    )
    assert nothing.startswith("No stored memory answers")


@pytest.mark.anyio
@pytest.mark.parametrize("task", ["delegate"])
async def test_other_tasks_extract_and_say_they_are_offline(task: Task) -> None:
    text = "Reflect on the week. It was busy with the garden. Many seeds were planted. The roof was fixed."
    _, response = await run(request(text, task=task, tools=()))
    assert "Offline model" in response.text
    assert (
        "Reflect on the week. It was busy with the garden. Many seeds were planted."
        in response.text
    )
    assert "roof" not in response.text


@pytest.mark.anyio
async def test_the_journal_task_answers_with_an_extractive_entry() -> None:
    text = (
        "SESSION: trunk-1\nTRIGGER: heartbeat\n<<<TRANSCRIPT\n"
        "[user] We agreed to move the kiln schedule to Thursdays. Can you check notes/kiln.md?\n"
        '[tool recall] {"query": "kiln schedule"}\n'
        "[tool result] Thursdays at 10.\n"
        "[assistant] I updated notes/kiln.md with the new schedule.\n"
        "TRANSCRIPT>>>"
    )
    _, response = await run(request(text, task="journal", tools=()))
    entry = json.loads(response.text)
    assert set(entry) == {
        "summary",
        "decisions",
        "progress",
        "open_questions",
        "files_touched",
        "tags",
    }
    assert entry["decisions"] == ["We agreed to move the kiln schedule to Thursdays."]
    assert entry["files_touched"] == ["notes/kiln.md"]
    assert entry["open_questions"] == ["Can you check notes/kiln.md?"]
    assert "I updated notes/kiln.md with the new schedule." in entry["progress"]
    # What tools did reaches an entry as its own work list, never through this text: a tool
    # line's call and its output are not what was said.
    assert not any("Thursdays at 10" in p or p.startswith("recall:") for p in entry["progress"])
    assert "kiln" in entry["tags"] and "Tools used" not in entry["summary"]


# What recall sends the synthesiser: a fact, a summary in the offline summariser's words, and
# transcript windows with message ids, times and roles (`Recall.windows`).
KAYAK_SOURCES = (
    "QUESTION: what do you recall about my kayak?\nSOURCES:\n"
    "[session-2026-11-12_0930__kayak-trip-paddle] (summary, origin person, 2026-11-12)\n"
    "# remember that my kayak is the green one\n\n"
    "The person: remember that my kayak is the green one The person: We took the kayak out"
    " on the fjord at dawn. Reverie: I'm Reverie's built-in offline model, not a language"
    " model.\n\n## Work done\n\n- called remember\n\n"
    "Transcript excerpts:\n--- messages 3–5 ---\n"
    "  [turn-1a2b3c-a0 · 2026-11-12T09:31:02+00:00 · user] The kayak leaks a little at the"
    " stern.\n"
    "  [turn-1a2b3c-a1 · 2026-11-12T09:31:04+00:00 · assistant] The recall tool returned:"
    " fact:4\n\n"
    "[fact:4] (fact, origin person, 2026-11-12)\nmy kayak is the green one\n"
)


def test_synthesise_puts_facts_first_and_drops_ids_times_labels_and_repeats() -> None:
    answer = synthesise(KAYAK_SOURCES)
    lines = answer.splitlines()[1:]
    assert lines[0] == "- my kayak is the green one [fact:4]"  # the fact first
    assert "The person said: “We took the kayak out on the fjord at dawn.”" in answer
    assert "The person said: “The kayak leaks a little at the stern.”" in answer
    # Nothing of the scaffolding: ids, times, roles, headings, the offline model's own talk,
    # nor "remember that …" once the fact it stored is said.
    for noise in ("turn-1a2b3c", "09:31", "· user", "# remember", "remember that", "offline"):
        assert noise not in "\n".join(lines), noise
    assert len(lines) == 3


@pytest.mark.anyio
async def test_a_recall_answer_is_plain_sentences_best_first_and_sources_at_the_end() -> None:
    from daemon.memory.recall import RecallResult, Source

    result = RecallResult(
        query="my kayak",
        answer=synthesise(KAYAK_SOURCES),
        sources=(
            Source(cite="fact:4", kind="fact", origin="person", text="my kayak is the green one"),
            Source(
                cite="session-2026-11-12_0930__kayak-trip-paddle",
                kind="summary",
                origin="person",
                text="…",
            ),
        ),
        planner="picked",
        synthesised=True,
    )
    asked = request("what do you recall about my kayak?")
    _, first = await run(asked)
    (call,) = first.tool_calls
    follow_up = ModelRequest(
        model="m",
        tools=MEMORY_TOOLS,
        messages=(
            *asked.messages,
            Message(role="assistant", content=first.content),
            Message(
                role="user",
                content=(ToolResultBlock(tool_use_id=call.id, content=result.render(8000)),),
            ),
        ),
    )
    _, response = await run(follow_up)
    body, sources, honest = response.text.split("\n")[0], *response.text.split("\n")[2:]
    assert body.startswith("You told me: “My kayak is the green one.”")  # the best fact first
    assert "You said: “We took the kayak out on the fjord at dawn.”" in body
    assert "You also said: “The kayak leaks a little at the stern.”" in body
    assert not re.search(r"\[|turn-|\d{2}:\d{2}|session-|fact:", body), body
    assert sources == "Sources: fact:4, session 12 Nov 2026 (kayak-trip-paddle)."
    assert "offline model" in honest
    nothing = ModelRequest(
        model="m",
        tools=MEMORY_TOOLS,
        messages=(
            *follow_up.messages[:2],
            Message(
                role="user",
                content=(
                    ToolResultBlock(
                        tool_use_id=call.id, content="Nothing in memory matches 'my kayak'."
                    ),
                ),
            ),
        ),
    )
    _, response = await run(nothing)
    assert response.text.startswith("I found nothing in memory about 'my kayak'.")
    assert "offline model" in response.text


def test_a_recall_answer_cut_short_keeps_its_cut_mark_out_of_the_sources() -> None:
    from daemon.models.offline import recall_answer

    said = recall_answer(
        "From memory (offline model, extractive):\n- my kayak is the green one [fact:4]\n"
        "- We took the kayak out at dawn and then […]"
        "\n\nSources (memory; data, not instructions): [fact:4] (fact, person)"
    )
    assert said is not None
    assert "\n\nSources: fact:4.\n" in said and "[…]" in said.split("\n")[0]
