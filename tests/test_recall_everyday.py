"""Recall and context as everyday conversations exercise them (issue 12).

Each test here failed before its fix: the addenda heading printed twice, facts shown in two
layers, the live conversation recalled back to itself, entities cut by the sub-query cap,
`memory.auto_recall_min` ignored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import anyio
import numpy as np
import pytest

from daemon.agent.turns import TurnDone, TurnEvent
from daemon.clock import FakeClock
from daemon.context.assembler import AssembledContext, ContextAssembler
from daemon.events import BeforeAgentStart
from daemon.memory.api import LiveHistory, MemoryItem
from daemon.memory.auto_recall import IndexMemoryView
from daemon.memory.embedders import HashEmbedder, NoEmbedder
from daemon.memory.index import MemoryIndex
from daemon.memory.query import decompose
from daemon.memory.rows import NewMemory
from daemon.memory.system import MemorySystem
from daemon.models.base import Model, ModelRequest
from daemon.paths import Home
from daemon.services import open_services
from daemon.settings import MemorySettings, Settings, TopicsSettings
from daemon.store.db import Database
from daemon.testing import ScriptedModel
from daemon.tokens import TokenCounter, count_tokens
from daemon.topics.router import ADDENDA_HEADING, TopicRouter
from tests.memory_support import NOW, add_session, memory_system, settings, unexpected

pytestmark = pytest.mark.anyio

TRIP = [
    ("user", "My flight to Lisbon is delayed and the hotel booking is wrong."),
    ("assistant", "Let's sort the hotel first, then the flight."),
]


def system_text(request: ModelRequest) -> str:
    return "\n\n".join(b.text for b in request.system)


async def test_topic_addenda_heading_appears_once_in_summariser_and_recall_prompts(
    tmp_path: Path,
) -> None:
    router = TopicRouter(Home(tmp_path), TopicsSettings())
    summary = json.dumps(
        {
            "title": "Lisbon trip",
            "slug": "lisbon-trip",
            "tags": [],
            "summary": "A delayed flight to Lisbon and a wrong hotel booking.",
            "decisions": [],
        }
    )
    summariser = ScriptedModel(lambda req: summary)
    planner = ScriptedModel(lambda req: json.dumps({"ids": ["summary:trip"]}))
    synthesis = ScriptedModel(lambda req: "The flight to Lisbon was delayed [session-x].")
    models = {"summariser": summariser, "recall_planner": planner, "recall_synthesis": synthesis}
    async with memory_system(tmp_path, models=models, topic_addenda=router.addenda) as memory:
        await add_session(memory.db, "trip", TRIP)
        await memory.index_session("trip")
        with anyio.fail_after(10):
            await memory.summarise_session("trip", wait=True)
            await memory.recall("what happened with my flight and hotel booking on the trip?")
    for request in (summariser.calls[0], planner.calls[0], synthesis.calls[0]):
        text = system_text(request)
        assert text.count(ADDENDA_HEADING) == 1, text
        assert "### Travel" in text


def layer_ids(result: AssembledContext, name: str) -> list[str]:
    row = next(r for r in result.report["layers"] if r["name"] == name)
    assert row is not None
    text = next((b.text for b in result.blocks if b.text.startswith(HEADINGS[name])), "")
    return re.findall(r'<memory id="([^"]+)"', text)


HEADINGS = {
    "themes": "## Recent themes",
    "recollections": "## Recollections",
    "recall": "## Recalled for this message",
    "profile": "## About your person",
}


def assembler(memory: MemorySystem, home: Home, config: Settings | None = None) -> ContextAssembler:
    cfg = config or memory.settings
    return ContextAssembler(
        home=home,
        settings=cfg,
        view=IndexMemoryView(memory.index, cfg.memory),
        router=TopicRouter(home, cfg.topics),
        counter=TokenCounter(),
        clock=FakeClock(NOW),
    )


async def test_no_memory_is_shown_in_both_themes_and_recollections(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    async with memory_system(tmp_path, clock=clock) as memory:
        for i in range(12):
            clock.advance(60)
            await memory.remember(
                f"Plant number {i} in the balcony garden needs water every {i + 2} days",
                origin="person",
            )
        await memory.remember(
            "I prefer green tea in the morning", origin="person", target="profile"
        )
        await memory.index.flush()
        with anyio.fail_after(10):
            result = await assembler(memory, Home(tmp_path)).assemble("what should I water today?")
    themes, recollections = layer_ids(result, "themes"), layer_ids(result, "recollections")
    assert len(themes) == memory.settings.context.themes_count  # still full, with older entries
    assert len(recollections) == memory.settings.context.recollection_facts
    assert not set(themes) & set(recollections)
    assert not set(themes) & set(layer_ids(result, "profile"))


@pytest.mark.parametrize("history_max_messages", [400, 2])
async def test_automatic_recall_never_brings_back_the_live_conversation(
    tmp_path: Path, history_max_messages: int
) -> None:
    """Three messages in, the recall layer holds older memories, not the turns being replayed.

    With room for one past turn only, the first turn is no longer replayed: recall may bring it.
    """
    clock = FakeClock(NOW)
    requests: list[ModelRequest] = []

    def reply(request: ModelRequest) -> str:
        requests.append(request)
        return "Noted about your sister."

    summary = json.dumps(
        {
            "title": "Sister",
            "slug": "sister",
            "tags": [],
            "summary": "Talked about the sister.",
            "decisions": [],
        }
    )
    models: dict[str, Model] = {
        "trunk": ScriptedModel(reply),
        "summariser": ScriptedModel(lambda req: summary),
        "recall_planner": unexpected("recall_planner"),
        "recall_synthesis": unexpected("recall_synthesis"),
    }
    home = Home(tmp_path)
    home.ensure()
    # The daemon's own wiring: its assembler, loop and trunk, memory indexing each finished turn.
    async with open_services(
        home, settings(), clock, models=models, embedder=HashEmbedder(), watch_files=False
    ) as services:
        memory, bus, trunk = services.memory, services.bus, services.trunk
        # Below what settings allow (4): room for one past turn only.
        trunk.loop.history_max_messages = history_max_messages
        await add_session(
            memory.db,
            "older",
            [("user", "My sister Ada moved to Lisbon last spring, near the river.")],
            started="2026-02-01T09:00:00+00:00",
        )
        await memory.index_session("older")
        starts: list[BeforeAgentStart] = []
        bus.on(BeforeAgentStart, starts.append)
        async with anyio.create_task_group() as tg:
            await tg.start(partial(services.serve, jobs=False))
            for text in (
                "I called my sister this morning.",
                "My sister sounded tired on the phone.",
                "Where does my sister live?",
            ):
                done: list[TurnEvent] = []
                await trunk.submit(text, observer=done.append)
                with anyio.fail_after(10):
                    while not any(isinstance(e, TurnDone) for e in done):
                        await anyio.sleep(0.01)
                    await bus.drain()  # the turn is indexed before the next one
            live = trunk.session.id  # type: ignore[union-attr]
            tg.cancel_scope.cancel()
        live_chunks = await memory.db.fetchall(
            "SELECT uid FROM memories WHERE session_id = ? AND kind = 'chunk'", (live,)
        )
    assert len(live_chunks) >= 4  # the first two turns were indexed: there was something to exclude
    # The message being answered is in the request: it counts as replayed even before its
    # transcript record (written while the context is assembled) exists.
    assert len(starts) == 3 and all(e.turn_id in e.replayed_message_ids for e in starts)
    recalled = system_text(requests[-1]).split("## Recalled for this message", 1)[1]
    ids = re.findall(r'<memory id="([^"]+)"', recalled)
    assert any(i.startswith("chunk:older:") for i in ids)
    assert "Where does my sister live" not in recalled
    if history_max_messages == 400:
        assert all(f":{live}:" not in i for i in ids), ids
        assert "sounded tired" not in recalled
    else:  # the first turn (messages 1-2) fell out of the replayed history; the second (3-4) did not
        assert f"chunk:{live}:3" not in ids and f"chunk:{live}:4" not in ids
        assert {f"chunk:{live}:1", f"chunk:{live}:1-w"} & set(ids), ids


@pytest.mark.parametrize("embedder", ["hash", "none"])
async def test_entities_are_looked_up_even_when_the_message_splits_into_many_clauses(
    tmp_path: Path, embedder: str
) -> None:
    """ "Ada" and "Lisbon" are searched on their own, past the sub-query cap. With no vectors
    (no question about a named person runs) and 300 flat notes matching most of the message,
    only their own look-ups bring them in."""
    config = Settings.model_validate({"memory": {"auto_recall_max": 6}})
    chosen = HashEmbedder() if embedder == "hash" else NoEmbedder()
    async with memory_system(tmp_path, config=config, embedder=chosen) as memory:
        noise = [
            (
                "user",
                f"The new flat {i} has a leaking sink, the plumber came back, the rent went up again and the landlord is slow.",
            )
            for i in range(300)
        ]
        await add_session(memory.db, "flat", noise, started="2026-03-01T09:00:00+00:00")
        await add_session(
            memory.db,
            "ada",
            [("user", "Ada got the promotion at the hospital.")],
            started="2026-01-10T09:00:00+00:00",
        )
        await add_session(
            memory.db,
            "city",
            [("user", "Lisbon trams are packed in summer.")],
            started="2026-01-11T09:00:00+00:00",
        )
        for sid in ("flat", "ada", "city"):
            await memory.index_session(sid)
        await memory.index.flush()
        message = (
            "How is the new flat doing with the leaking sink, did the plumber come back about the rent, "
            "is the landlord still slow, and what about Ada and Lisbon?"
        )
        with anyio.fail_after(10):
            found = await IndexMemoryView(memory.index, config.memory).auto_recall(message, limit=6)
    texts = " ".join(i.text for i in found)
    assert "Ada got the promotion" in texts and "Lisbon trams" in texts


async def test_auto_recall_min_long_memories_are_shortened_so_the_minimum_fits(
    tmp_path: Path,
) -> None:
    def long(plant: str) -> str:
        return f"Ada's garden plan for {plant}: " + " ".join(
            f"row {i} gets {plant}, a drip line." for i in range(40)
        )

    results: dict[int, list[str]] = {}
    for minimum in (1, 3):
        config = Settings.model_validate(
            {"memory": {"auto_recall_min": minimum, "auto_recall_tokens": 600}}
        )
        async with memory_system(tmp_path / str(minimum), config=config) as memory:
            for plant in ("tomatoes", "courgettes", "runner beans"):
                await memory.remember(long(plant), origin="person")
            await memory.index.flush()
            with anyio.fail_after(10):
                found = await IndexMemoryView(memory.index, config.memory).auto_recall(
                    "what is in Ada's garden plan?"
                )
            results[minimum] = [i.text for i in found]
    assert len(results[1]) == 1  # one long memory fills the budget on its own
    assert len(results[3]) == 3 and all(t.endswith("[…]") for t in results[3])
    assert sum(count_tokens(t) for t in results[3]) <= 600


async def seed_summaries(memory: MemorySystem, n: int) -> None:
    """`n` summarised sessions a day apart, newest last; session 3 is the one about the kiln."""
    items = []
    for i in range(n):
        topic = (
            "the pottery kiln firing schedule and glaze cracks"
            if i == 3
            else f"weekly groceries list number {i} and the bus timetable"
        )
        when = datetime(2025, 6, 1, 9, 0, tzinfo=UTC) + timedelta(days=i)
        items.append(
            NewMemory(
                uid=f"summary:s{i}",
                kind="summary",
                text=f"We talked about {topic}.",
                title=f"Session {i}",
                origin="agent",
                created_at=when,
                session_id=f"s{i}",
                source=f"/home/memory/sessions/session-{i:03d}__slug-{i}.md",
                meta={"file": f"session-{i:03d}__slug-{i}.md"},
            )
        )
    await memory.index.upsert(items)


@pytest.mark.parametrize("budget", [6000, 400])
async def test_the_planner_sees_every_session_within_its_budget_facts_first(
    tmp_path: Path, budget: int
) -> None:
    config = Settings.model_validate({"memory": {"planner_index_tokens": budget}})
    planner = ScriptedModel(lambda req: json.dumps({"ids": ["summary:s3"]}))
    synthesis = ScriptedModel(lambda req: "Bisque on Fridays [session-003__slug-3].")
    async with memory_system(
        tmp_path, config=config, models={"recall_planner": planner, "recall_synthesis": synthesis}
    ) as memory:
        await seed_summaries(memory, 80)
        await memory.remember("The kiln needs a bisque firing every Friday", origin="person")
        await memory.index.flush()
        with anyio.fail_after(10):
            result = await memory.recall_result("when do I fire the pottery kiln?")
    lines = planner.calls[0].messages[-1].text.split("\nINDEX:\n", 1)[1].splitlines()
    assert lines[0].startswith("fact:1 | explicit fact | The kiln needs a bisque firing")
    sessions = [line.split(" | ")[0] for line in lines[1:]]
    assert "summary:s3" in sessions  # the relevant one, though 76 sessions are newer
    assert (
        "summary:s3 | session-003__slug-3 | 2025-06-04 | Session 3: We talked about the pottery kiln"
        in "\n".join(lines)
    )
    if budget == 6000:
        assert sorted(sessions) == sorted(f"summary:s{i}" for i in range(80))  # all of them, not 24
    else:
        assert 5 < len(sessions) < 80
        assert sum(count_tokens(line) + 1 for line in lines) <= budget
        newest = [f"summary:s{i}" for i in range(79, 76, -1)]
        assert set(newest) <= set(sessions)  # the newest survive the cut
    assert [s.cite for s in result.sources][:2] == ["fact:1", "session-003__slug-3"]


async def test_a_second_hop_finds_the_answer_through_a_name_the_question_never_says(
    tmp_path: Path,
) -> None:
    """The answer shares only "Tomas" with the first hit, and nothing with the question."""
    lines = [
        ("user", "My brother Tomas just got into medical school, we're all so proud!"),
        ("user", "Tomas already complains about the anatomy exams, he studies every single night."),
    ]
    noise = [
        (
            "user",
            f"My brother-in-law {name} works at the school cafeteria and says medical insurance is pricey.",
        )
        for name in (
            "Aldo",
            "Bram",
            "Cyril",
            "Dario",
            "Emil",
            "Fabio",
            "Gianni",
            "Hugo",
            "Ivo",
            "Jules",
            "Kurt",
            "Lars",
        )
    ]
    results: dict[int, list[str]] = {}
    for hops in (1, 2):
        config = Settings.model_validate({"memory": {"search_hops": hops, "chunk_messages": 1}})
        async with memory_system(tmp_path / str(hops), config=config) as memory:
            await add_session(memory.db, "early", lines[:1], started="2026-01-05T09:00:00+00:00")
            await add_session(memory.db, "noise", noise, started="2026-01-20T09:00:00+00:00")
            await add_session(memory.db, "later", lines[1:], started="2026-02-10T09:00:00+00:00")
            for sid in ("early", "noise", "later"):
                await memory.index_session(sid)
            await memory.index.flush()
            plan = decompose("How is my brother getting on at medical school?", now=NOW)
            with anyio.fail_after(10):
                found = await memory.index.search_plan(plan, k=5, mode="lexical")
            results[hops] = [i.text for i in found]
    assert not any("anatomy" in t for t in results[1])
    assert "Tomas just got into medical school" in results[2][0]  # the first hop keeps its place
    assert any("anatomy exams" in t for t in results[2])


class CountingEmbedder(HashEmbedder):
    """A real hashing embedder that remembers every text it was asked to encode."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.extend(texts)
        return super().embed_sync(texts)


async def test_overlapping_windows_are_pooled_from_their_messages_never_encoded_again(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    home.ensure()
    embedder = CountingEmbedder()
    chat = [
        (
            "user" if i % 2 else "assistant",
            f"message {i} about the allotment, the shed and the tomato seedlings",
        )
        for i in range(14)
    ]
    async with await Database.open(home.db_file) as db:
        async with MemoryIndex(
            db, embedder, MemorySettings(), FakeClock(NOW), background=False
        ) as index:
            await add_session(db, "garden", chat)
            await index.index_session("garden")
            await index.flush()
            windows = await db.fetchall(
                "SELECT uid, content_hash, meta FROM memories WHERE uid LIKE '%-w'"
            )
            assert len(windows) >= 3
            vectors = {
                r[0]: np.frombuffer(r[1], dtype=np.float32)
                for r in await db.fetchall(
                    "SELECT m.uid, e.vector FROM memories m JOIN embeddings e ON e.content_hash = m.content_hash"
                )
            }
    assert len(embedder.seen) == len(chat)  # one encode per message, none per window
    assert not any("\n" in text for text in embedder.seen)
    for uid, _, meta in windows:
        parts = json.loads(meta)["parts"]
        mean = np.mean([vectors[p] for p in parts], axis=0)
        assert np.allclose(vectors[uid], mean / np.linalg.norm(mean), atol=1e-6)


async def test_the_embedding_worker_finds_stored_vectors_by_their_key_never_by_model(
    tmp_path: Path,
) -> None:
    """Each round's lookups go by content hash: a walk over the model's vectors per round made a
    large backlog quadratic (the planner's choice for a join, with no statistics gathered)."""
    home = Home(tmp_path)
    home.ensure()
    chat = [("user" if i % 2 else "assistant", f"message {i} about the kiln") for i in range(300)]
    statements: list[str] = []
    async with await Database.open(home.db_file) as db:
        async with MemoryIndex(
            db, HashEmbedder(), MemorySettings(), FakeClock(NOW), background=False
        ) as index:
            await add_session(db, "pottery", chat)
            await index.index_session("pottery")
            await db.run(lambda conn: conn.set_trace_callback(statements.append))
            try:
                await index.embedding._embed_pending()
            finally:
                await db.run(lambda conn: conn.set_trace_callback(None))
            reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
            steps = [
                r[3]
                for sql in reads
                if "embeddings" in sql
                for r in await db.fetchall(f"EXPLAIN QUERY PLAN {sql}")
            ]
    assert any("vector" in sql and "embeddings" in sql for sql in reads)  # windows were pooled
    # The steps on the vectors' table ("SEARCH e …", "SEARCH embeddings …").
    steps = [s for s in steps if s.split()[1] in ("e", "embeddings")]
    assert steps
    assert all("content_hash=?" in step for step in steps), steps


async def test_items_covering_more_of_the_question_rise_among_near_equals(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await memory.index.upsert([
            NewMemory(uid="a", kind="fact", text="Ada Ada Ada, always Ada.", origin="person", created_at=NOW),
            NewMemory(uid="b", kind="fact", text="Ada baked a lemon cake for the picnic.", origin="person", created_at=NOW),
        ])  # fmt: skip
        rows = {
            r[0]: r[1]
            for r in await memory.db.fetchall(
                "SELECT uid, rowid FROM memories WHERE uid IN ('a', 'b')"
            )
        }
        plan = decompose("What did Ada bake for the picnic?", now=NOW)
        ranked = await memory.index.searcher._by_facets(plan, [(rows["a"], 1.0), (rows["b"], 0.9)])
    assert [r for r, _ in ranked] == [
        rows["b"],
        rows["a"],
    ]  # 3 of 3 facets beat 1 of 3 at a 10% lower score


async def test_before_or_after_an_event_bounds_the_search_by_that_events_date(
    tmp_path: Path,
) -> None:
    """ "before moving to Ashford": the move is found first, and its date becomes the bound."""
    async with memory_system(tmp_path) as memory:
        said = {
            "s1": ("2025-03-01T09:00:00+00:00", "I joined the rowing club down by the canal."),
            "s2": ("2025-06-01T09:00:00+00:00", "We finally moved to Ashford! Boxes everywhere."),
            "s3": ("2025-09-01T09:00:00+00:00", "I joined a choir that sings on Thursdays."),
        }
        for sid, (ts, text) in said.items():
            await memory.db.execute(
                "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, 'trunk', ?, ?)",
                (sid, f"/x/{sid}.jsonl", ts),
            )
            await memory.db.execute(
                "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?, ?, 0, ?, 'user', ?)",
                (sid, f"{sid}-m0", ts, text),
            )
        for sid in ("s1", "s2", "s3"):
            await memory.index_session(sid)
        await memory.index.flush()
        with anyio.fail_after(10):
            before = await memory.index.search_plan(
                decompose("What did I join before moving to Ashford?", now=NOW), k=3
            )
            after = await memory.index.search_plan(
                decompose("What did I join after moving to Ashford?", now=NOW), k=3
            )
    assert "rowing club" in before[0].text
    assert "choir" in after[0].text


def test_the_live_history_shows_replayed_messages_and_windows_that_touch_them() -> None:
    live = LiveHistory(session="s", message_ids=frozenset({"m3", "m4"}))

    def item(session: str, *ids: str) -> MemoryItem:
        return MemoryItem(
            id="x", kind="chunk", text="", origin="agent", session=session, message_ids=ids
        )

    assert live.shows(item("s", "m3"))
    assert not live.shows(item("s", "m1"))  # a message that fell out of the replay
    assert live.shows(item("s", "m1", "m2", "m3"))  # a window reaching into the live moment
    assert not live.shows(item("s", "m1", "m2"))
    assert not live.shows(item("other", "m3"))
    assert not live.shows(item("s"))  # no messages named (a summary)
