"""Delegate forks in-process: the real agent loop, context assembler, memory and database, with a
scripted model playing the trunk and every fork (each fork is scripted by its task)."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.agent.loop import AgentLoop, TurnResult
from daemon.agent.session import Session
from daemon.agent.transcript import Transcript
from daemon.agent.turns import ToolPhase, TurnEvent
from daemon.bus import EventBus, Veto
from daemon.clock import FakeClock
from daemon.delegate.fork import Delegator
from daemon.delegate.lineage import ForkLineage
from daemon.events import BeforeFork, ForkNote, JournalNote, SessionShutdown
from daemon.memory.embedders import HashEmbedder
from daemon.memory.system import MemorySystem
from daemon.models.base import Model, ModelRequest, ToolResultBlock, Usage
from daemon.models.ledger import UsageLedger
from daemon.models.offline import OfflineModel
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.records import MessageRecord, SessionStart
from daemon.services import Services, open_services
from daemon.settings import DelegateSettings, SchedulerSettings, Settings
from daemon.store.db import Database
from daemon.testing import Reply, ScriptedModel
from daemon.tokens import TokenCounter
from daemon.tools.registry import ToolRegistry

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 3, 10, 0, tzinfo=UTC)
# A word only the trunk's conversation contains: it must never reach a fork.
SECRET = "zanzibarian"

ForkScript = Callable[[ModelRequest], Reply | str]


def task_of(request: ModelRequest) -> str | None:
    """The fork's objective, from the framing line of its brief (None for the trunk)."""
    first = request.messages[0].text if request.messages else ""
    found = re.search(r"You are in focused task mode\. Your objective is: (.+)", first)
    return found[1].strip() if found else None


def last_results(request: ModelRequest) -> list[ToolResultBlock]:
    last = request.messages[-1]
    return (
        [b for b in last.content if isinstance(b, ToolResultBlock)] if last.role == "user" else []
    )


def request_text(request: ModelRequest) -> str:
    parts = [b.text for b in request.system]
    for m in request.messages:
        for b in m.content:
            parts.append(
                getattr(b, "text", "")
                or getattr(b, "content", "")
                or json.dumps(getattr(b, "input", {}))
            )
    return "\n".join(parts)


@dataclass
class Play:
    """Scripts per actor: the trunk's replies in order, and each fork's by its task."""

    trunk: deque[Reply | str | ForkScript] = field(default_factory=deque)
    forks: dict[str, deque[Reply | str | ForkScript]] = field(default_factory=dict)
    requests: list[tuple[str, ModelRequest]] = field(default_factory=list)

    def __call__(self, request: ModelRequest) -> Reply | str:
        task = task_of(request)
        who = "trunk" if task is None else task
        self.requests.append((who, request))
        queue = self.trunk if task is None else self.forks.get(task)
        if not queue:
            raise AssertionError(f"nothing scripted for {who!r}")
        step = queue.popleft()
        return step(request) if callable(step) else step

    def of(self, who: str) -> list[ModelRequest]:
        return [r for w, r in self.requests if w == who]


@dataclass
class Rig:
    home: Home
    db: Database
    bus: EventBus
    memory: MemorySystem
    delegator: Delegator
    loop: AgentLoop
    session: Session
    model: ScriptedModel
    play: Play
    services: Services
    events: list[TurnEvent] = field(default_factory=list)

    async def turn(self, prompt: str, turn_id: str = "t1") -> TurnResult:
        with anyio.fail_after(30):
            return await self.loop.run_turn(
                self.session,
                turn_id=turn_id,
                prompt=prompt,
                observer=self.events.append,
                ts=NOW.isoformat(),
            )

    def fork_phases(self) -> list[ToolPhase]:
        return [e for e in self.events if isinstance(e, ToolPhase) and e.name == "fork"]


@asynccontextmanager
async def rig(
    tmp_path: Path, play: Play, *, home: Home | None = None, **delegate: Any
) -> AsyncIterator[Rig]:
    """The daemon's services (`open_services`), not serving: a test runs turns on their loop
    in a session of its own, `trunk-1`, so that ids in the lineage are known in advance."""
    home = home or Home(tmp_path / "home")
    home.ensure()
    settings = Settings(
        scheduler=SchedulerSettings(timezone="UTC"), delegate=DelegateSettings(**delegate)
    )
    clock = FakeClock(NOW)
    model = ScriptedModel(play)
    offline = OfflineModel()
    models: dict[str, Model] = {
        "trunk": model,
        "delegate": model,
        "summariser": offline,
        "recall_planner": offline,
        "recall_synthesis": offline,
    }
    async with open_services(
        home, settings, clock, models=models, embedder=HashEmbedder(), watch_files=False
    ) as services:
        session = await Session.open(
            db=services.db, directory=home.trunk_dir, session_id="trunk-1", kind="trunk", now=NOW
        )
        yield Rig(
            home=home,
            db=services.db,
            bus=services.bus,
            memory=services.memory,
            delegator=services.delegator,
            loop=services.trunk.loop,
            session=session,
            model=model,
            play=play,
            services=services,
        )


def delegate(task: str, context: str = "") -> tuple[str, dict[str, Any]]:
    return ("delegate", {"task": task, "context": context} if context else {"task": task})


def complete(summary: str, outcome: str = "success", artifacts: list[str] | None = None) -> Reply:
    args: dict[str, Any] = {"summary": summary, "outcome": outcome}
    if artifacts:
        args["artifacts"] = artifacts
    return Reply(tool_calls=(("task_complete", args),))


def echo_result(prefix: str) -> ForkScript:
    """Answer with the text of the tool results the model just got."""

    def step(request: ModelRequest) -> Reply | str:
        got = " | ".join(b.content for b in last_results(request))
        return f"{prefix}{got}"

    return step


def complete_with_result(prefix: str) -> ForkScript:
    def step(request: ModelRequest) -> Reply:
        got = " | ".join(b.content for b in last_results(request))
        return complete(f"{prefix}{got}")

    return step


async def test_a_fork_tree_three_deep_returns_the_deepest_result(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [
        Reply(
            tool_calls=(delegate("survey the kelp farms", f"The person ({SECRET}) wants numbers."),)
        ),
        echo_result("Done: "),
    ]
    play.forks["survey the kelp farms"] = deque(
        [
            Reply(tool_calls=(delegate("count the northern farm"),)),
            complete_with_result("north says: "),
        ]
    )
    play.forks["count the northern farm"] = deque(
        [Reply(tool_calls=(delegate("count the rows"),)), complete_with_result("rows say: ")]
    )
    play.forks["count the rows"] = deque([complete("42 rows of kelp", artifacts=["fact:none"])])
    async with rig(tmp_path, play) as r:
        result = await r.turn(f"Please find how much kelp we have, {SECRET} style.")
        rows = await ForkLineage(r.db).all()
        forks_dir = r.home.forks_dir
        fork_files = sorted(p.name for p in forks_dir.glob("*.jsonl"))

    assert (
        "42 rows of kelp" in result.text
        and "north says: " in result.text
        and "rows say: " in result.text
    )
    by_depth = {row.depth: row for row in rows}
    assert sorted(by_depth) == [1, 2, 3]
    assert by_depth[1].parent_session_id == "trunk-1"
    assert by_depth[2].parent_session_id == by_depth[1].id
    assert by_depth[3].parent_session_id == by_depth[2].id
    assert {row.root_session_id for row in rows} == {"trunk-1"}
    assert all(row.status == "complete" and row.outcome == "success" for row in rows)
    assert fork_files == sorted(f"{row.id}.jsonl" for row in rows)
    # The fork at the depth limit is not offered `delegate`; the ones above it are.
    assert "delegate" not in {t.name for t in play.of("count the rows")[0].tools}
    assert {"delegate", "task_complete", "remember", "recall"} <= {
        t.name for t in play.of("count the northern farm")[0].tools
    }
    assert "task_complete" not in {t.name for t in play.of("trunk")[0].tools}
    # Every fork starts from persona + NEUROLOGY + framing + brief; none sees the trunk's words.
    for task in ("survey the kelp farms", "count the northern farm", "count the rows"):
        first = play.of(task)[0]
        assert len(first.messages) == 1
        assert first.messages[0].text.startswith(
            f"You are in focused task mode. Your objective is: {task}"
        )
        system = "\n".join(b.text for b in first.system)
        assert "Neurology: how my mind is put together" in system
    assert (
        f"The person ({SECRET}) wants numbers."
        in play.of("survey the kelp farms")[0].messages[0].text
    )
    for task in ("count the northern farm", "count the rows"):
        assert SECRET not in request_text(play.of(task)[0])
    assert "Neurology: how my mind is put together" not in "\n".join(
        b.text for b in play.of("trunk")[0].system
    )
    # The person sees each fork start and finish, under the trunk's turn, with its depth.
    phases = [(p.phase, p.depth) for p in r.fork_phases()]
    assert phases == [
        ("started", 1),
        ("started", 2),
        ("started", 3),
        ("finished", 3),
        ("finished", 2),
        ("finished", 1),
    ]
    assert {p.turn_id for p in r.fork_phases()} == {"t1"}
    assert all(p.fork_id for p in r.fork_phases())


async def test_the_depth_limit_cannot_be_exceeded(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("dig deeper"),)), echo_result("")]
    # At the limit the fork is not offered delegate; it calls it anyway, is refused, then finishes.
    play.forks["dig deeper"] = deque(
        [Reply(tool_calls=(delegate("even deeper"),)), complete_with_result("after refusal: ")]
    )
    async with rig(tmp_path, play, max_depth=1) as r:
        result = await r.turn("go")
        rows = await ForkLineage(r.db).all()
    assert [row.depth for row in rows] == [1]
    assert "delegate" not in {t.name for t in play.of("dig deeper")[0].tools}
    refusal = last_results(play.of("dig deeper")[1])[0]
    assert refusal.is_error and "depth limit is 1" in refusal.content
    assert "after refusal: error: refused" in result.text
    assert "even deeper" not in play.forks


async def test_parallel_forks_run_together_and_their_memories_all_land(tmp_path: Path) -> None:
    tasks = [f"collect facts about garden bed {n}" for n in range(3)]
    words = [
        ("tomatoes", "trellis", "ladybirds", "mulch"),
        ("garlic", "frost", "netting", "pigeons"),
        ("rhubarb", "shade", "slugs", "copper"),
    ]
    said = {
        n: [
            f"{words[n][k]} matter most for bed {'north south east'.split()[n]} (note {n}.{k})"
            for k in range(4)
        ]
        for n in range(3)
    }
    play = Play()
    play.trunk += [Reply(tool_calls=tuple(delegate(t) for t in tasks)), echo_result("")]
    for n, t in enumerate(tasks):
        steps: deque[Reply | str | ForkScript] = deque()
        for k in range(4):
            steps.append(
                Reply(tool_calls=(("remember", {"text": said[n][k]}),), wait_s=0.01 * ((n + k) % 3))
            )
        steps.append(complete(f"bed {n} noted"))
        play.forks[t] = steps
    async with rig(tmp_path, play, max_parallel=3) as r:
        result = await r.turn("collect the garden facts")
        facts = [f.text for f in r.memory.facts.facts()]
        log_lines = (r.home.memory_dir / "facts.jsonl").read_text().splitlines()
        indexed = await r.db.fetchall("SELECT COUNT(*) FROM memories WHERE kind = 'fact'")
    expected = {text for texts in said.values() for text in texts}
    assert expected <= set(facts) and len(facts) == 12
    assert all(json.loads(line) for line in log_lines)  # no torn or interleaved line
    assert indexed[0][0] == 12
    assert all(f"bed {n} noted" in result.text for n in range(3))
    # All three were running at once: every start comes before the first finish.
    phases = [p.phase for p in r.fork_phases() if p.depth == 1]
    assert phases[:3] == ["started"] * 3


async def test_max_parallel_bounds_how_many_forks_run_at_once(tmp_path: Path) -> None:
    tasks = [f"task number {n}" for n in range(3)]
    play = Play()
    play.trunk += [Reply(tool_calls=tuple(delegate(t) for t in tasks)), "ok"]
    for t in tasks:
        play.forks[t] = deque(
            [
                Reply(
                    tool_calls=(("task_complete", {"summary": t, "outcome": "success"}),),
                    wait_s=0.05,
                )
            ]
        )
    async with rig(tmp_path, play, max_parallel=2) as r:
        await r.turn("go")
    phases = [p.phase for p in r.fork_phases()]
    assert phases[:3] == ["started", "started", "finished"]
    # The results come back in the order the calls were made, whatever order they finished in.
    results = last_results(play.of("trunk")[1])
    assert [t in res.content for t, res in zip(tasks, results, strict=True)] == [True, True, True]


async def test_inactivity_timeout_returns_the_partial_output_marked(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("slow research"),)), echo_result("")]
    play.forks["slow research"] = deque(
        [
            Reply(
                text="First finding: the pump is fine.", tool_calls=(("recall", {"query": "pump"}),)
            ),
            Reply(text="never", wait_s=10),
        ]
    )
    async with rig(tmp_path, play, inactivity_timeout_s=0.4) as r:
        result = await r.turn("research")
        rows = await ForkLineage(r.db).all()
    assert rows[0].status == "stopped" and "no activity for 0.4s" in (rows[0].stop_reason or "")
    assert "PARTIAL OUTPUT — the fork was stopped: no activity for 0.4s" in result.text
    assert "First finding: the pump is fine." in result.text
    assert "never" not in result.text


async def test_the_tree_ceiling_stops_the_whole_tree(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("outer"),)), echo_result("")]
    play.forks["outer"] = deque(
        [Reply(text="Outer began.", tool_calls=(delegate("inner"),)), "unreached"]
    )
    play.forks["inner"] = deque(
        [
            Reply(text="Inner began.", tool_calls=(("recall", {"query": "x"}),)),
            Reply(text="hung", wait_s=10),
        ]
    )
    async with rig(tmp_path, play, tree_timeout_s=0.5, inactivity_timeout_s=5) as r:
        started = anyio.current_time()
        result = await r.turn("go")
        took = anyio.current_time() - started
        rows = {row.depth: row for row in await ForkLineage(r.db).all()}
    assert took < 3
    assert rows[1].status == "stopped" and "ceiling of 0.5s" in (rows[1].stop_reason or "")
    assert rows[2].status in ("stopped", "cancelled")
    assert "PARTIAL OUTPUT" in result.text and "Outer began." in result.text


async def test_the_token_budget_stops_a_fork_with_its_partial_output(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("expensive"),)), echo_result("")]
    play.forks["expensive"] = deque(
        [
            Reply(
                text="Step one result.",
                tool_calls=(("recall", {"query": "x"}),),
                usage=Usage(input_tokens=1500, output_tokens=10),
            ),
            "unreached",
        ]
    )
    async with rig(tmp_path, play, token_budget=1000) as r:
        result = await r.turn("go")
        row = (await ForkLineage(r.db).all())[0]
    assert (
        row.status == "stopped" and "token budget" in (row.stop_reason or "") and row.tokens == 1510
    )
    assert "PARTIAL OUTPUT" in result.text and "Step one result." in result.text
    assert len(play.of("expensive")) == 1


async def test_a_fork_that_stops_without_task_complete_is_incomplete(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("quick"),)), echo_result("")]
    play.forks["quick"] = deque(["I looked and the answer is 7."])
    async with rig(tmp_path, play) as r:
        result = await r.turn("go")
        row = (await ForkLineage(r.db).all())[0]
    assert row.status == "incomplete"
    assert "without calling task_complete" in result.text and "the answer is 7" in result.text


async def test_cancelling_the_trunk_turn_cancels_its_forks(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("long a"), delegate("long b")))]
    play.forks["long a"] = deque([Reply(text="x", wait_s=30)])
    play.forks["long b"] = deque([Reply(text="y", wait_s=30)])
    shutdowns: list[str] = []
    async with rig(tmp_path, play) as r:
        r.bus.on(SessionShutdown, lambda e: shutdowns.append(e.session_id))
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def run() -> None:
                    await r.loop.run_turn(
                        r.session,
                        turn_id="t1",
                        prompt="go",
                        observer=r.events.append,
                        ts=NOW.isoformat(),
                    )

                tg.start_soon(run)
                while len([p for p in r.fork_phases() if p.phase == "started"]) < 2:
                    await anyio.sleep(0.01)
                tg.cancel_scope.cancel()
        rows = await ForkLineage(r.db).all()
        records = [
            Transcript(path=Path(row.transcript_path), session_id=row.id).records() for row in rows
        ]
    assert [row.status for row in rows] == ["cancelled", "cancelled"]
    # Besides the forks', only the daemon's own trunk session ended (as the services closed).
    daemon_session = r.services.trunk.session.id  # type: ignore[union-attr]
    assert sorted(s for s in shutdowns if s != daemon_session) == sorted(row.id for row in rows)
    for recs in records:
        assert recs[-2]["type"] == "turn_end" and recs[-2]["status"] == "cancelled"
        assert recs[-1]["type"] == "fork_end" and recs[-1]["status"] == "cancelled"
    assert r.delegator.running == 0


async def test_before_fork_can_add_to_the_brief_or_veto(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [
        Reply(tool_calls=(delegate("allowed task"), delegate("forbidden task"))),
        echo_result(""),
    ]
    play.forks["allowed task"] = deque([complete("fine")])
    async with rig(tmp_path, play) as r:

        def gate(event: BeforeFork) -> Veto | ForkNote:
            if "forbidden" in event.task:
                return Veto(reason="not tonight")
            return ForkNote(text="The person is travelling this week.", source="test.travel")

        # Named after the handler when the note names no source; blank notes add nothing.
        r.bus.on(BeforeFork, lambda e: ForkNote(text="Mind the budget."), name="test.budget")
        r.bus.on(BeforeFork, lambda e: ForkNote(text="  "), name="test.blank")

        r.bus.on(BeforeFork, gate, name="test.gate")
        result = await r.turn("go")
        rows = {row.task: row for row in await ForkLineage(r.db).all()}
    brief = play.of("allowed task")[0].messages[0].text
    assert (
        "## Notes added before this fork started\n- [test.budget] Mind the budget.\n"
        "- [test.travel] The person is travelling this week."
    ) in brief and "[test.blank]" not in brief
    assert rows["forbidden task"].status == "vetoed"
    assert "vetoed by test.gate: not tonight" in result.text


async def test_a_fork_sees_no_memory_of_the_trunks_live_session(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [
        "Noted: the heron nests by the quarry.",
        Reply(tool_calls=(delegate("find the heron nests"),)),
        "ok",
        "and?",
    ]
    play.forks["find the heron nests"] = deque([complete("looked")])
    async with rig(tmp_path, play) as r:
        await r.turn(f"The {SECRET} heron nests by the quarry.", turn_id="t1")
        await r.memory.index_session("trunk-1")
        # Its summary too: the recollections layer would show it to anyone but a fork of it.
        await r.memory.summarise_session("trunk-1", wait=True)
        await r.turn("Find the heron nests for me.", turn_id="t2")
        await r.turn(f"heron nests {SECRET}?", turn_id="t3")
    fork_system = "\n".join(b.text for b in play.of("find the heron nests")[0].system)
    assert SECRET not in fork_system and "quarry" not in fork_system
    # The trunk's own later turn does recall it: the exclusion is the fork's alone.
    assert SECRET in "\n".join(b.text for b in play.of("trunk")[3].system)


async def test_fork_session_shutdown_writes_a_summary_tagged_as_a_fork(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("measure the greenhouse"),)), "ok"]
    play.forks["measure the greenhouse"] = deque(
        [
            "The greenhouse measures twelve metres by four metres.",
        ]
    )
    notes: list[JournalNote] = []
    async with rig(tmp_path, play) as r:
        r.bus.on(JournalNote, notes.append)
        await r.turn("go")
        row = (await ForkLineage(r.db).all())[0]
        with anyio.fail_after(10):
            while True:
                got = await r.db.fetchone(
                    "SELECT summary_path FROM sessions WHERE id = ?", (row.id,)
                )
                if got and got[0]:
                    break
                await anyio.sleep(0.02)
        text = Path(got[0]).read_text()
        indexed = await r.db.fetchone(
            "SELECT tags FROM memories WHERE uid = ?", (f"summary:{row.id}",)
        )
    assert 'kind: "fork"' in text
    assert indexed is not None and "fork" in indexed[0]
    assert (
        notes
        and "measure the greenhouse" in notes[0].summary
        and notes[0].tags == ("delegate", "incomplete")
    )


async def test_a_fork_interrupted_by_a_crash_is_reported_failed_to_its_parent_turn(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    # What a crash mid-fork leaves: the lineage row `running`, a transcript with partial work.
    async with await Database.open(home.db_file) as db:
        await ForkLineage(db).start(
            fork_id="fork-crashed",
            parent_session_id="trunk-1",
            parent_turn_id="t1",
            parent_call_id="toolu_1",
            root_session_id="trunk-1",
            depth=1,
            task="index the photos",
            transcript_path=str(home.forks_dir / "fork-crashed.jsonl"),
            started_at=NOW,
        )
    await Transcript(path=home.forks_dir / "fork-crashed.jsonl", session_id="fork-crashed").append(
        SessionStart(id="fork-crashed", kind="fork", started_at=NOW.isoformat()),
        MessageRecord(
            id="fork-crashed-t1-a0",
            role="assistant",
            content="Indexed 40 of 90 photos.",
            turn_id="fork-crashed-t1",
            ts=NOW.isoformat(),
        ),
    )
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("index the photos"),)), echo_result("")]
    async with rig(tmp_path, play, home=home) as r:
        recovered = (await ForkLineage(r.db).all())[0]
        result = await r.turn("index my photos", turn_id="t1")
        after = await ForkLineage(r.db).all()
    assert recovered.status == "failed" and not recovered.reported
    assert "The fork failed: interrupted: the daemon stopped" in result.text
    assert "Indexed 40 of 90 photos." in result.text
    assert [row.id for row in after] == ["fork-crashed"] and after[0].reported
    records = Transcript(path=home.forks_dir / "fork-crashed.jsonl", session_id="x").records()
    assert records[-1]["type"] == "turn_end" and records[-1]["status"] == "failed"


def test_the_chat_client_shows_forks_by_depth() -> None:
    import io

    from daemon.cli.chat import Notes

    notes = Notes(io.StringIO())
    assert notes.describe(
        {
            "type": "tool",
            "name": "fork",
            "phase": "started",
            "depth": 2,
            "fork_id": "fork-b",
            "detail": "count rows",
        }
    ) == ("[  fork fork-b (depth 2) started: count rows]")
    # One line per call, saying what it does, indented by depth; a call that finished well
    # adds nothing, a failure adds its own line.
    assert (
        notes.describe(
            {
                "type": "tool",
                "name": "recall",
                "phase": "started",
                "depth": 1,
                "fork_id": "fork-a",
                "summary": "recall: herons",
            }
        )
        == "[  ▸ recall: herons in fork-a]"
    )
    assert (
        notes.describe(
            {"type": "tool", "name": "recall", "phase": "finished", "depth": 1, "fork_id": "fork-a"}
        )
        is None
    )
    assert (
        notes.describe(
            {"type": "tool", "name": "recall", "phase": "finished", "depth": 1, "is_error": True}
        )
        == "[  tool recall finished (error)]"
    )
    assert (
        notes.describe({"type": "tool", "name": "recall", "phase": "started"})
        == "[tool recall started]"
    )


async def test_a_fork_sees_nothing_of_the_other_forks_of_its_tree(tmp_path: Path) -> None:
    play = Play()
    # One at a time: the second fork starts after the first has ended and been indexed.
    play.trunk += [
        Reply(
            tool_calls=(
                delegate("scout the bramblewick hedge"),
                delegate("map the bramblewick hedge"),
            )
        ),
        "ok",
        "and?",
    ]
    play.forks["scout the bramblewick hedge"] = deque(
        [complete("The bramblewick hedge hides a badger sett by the stile.")]
    )
    play.forks["map the bramblewick hedge"] = deque([complete("mapped")])
    async with rig(tmp_path, play, max_parallel=1) as r:
        await r.turn("Survey the hedge.", turn_id="t1")
        await r.turn("What about the bramblewick hedge badger sett?", turn_id="t2")
    second = "\n".join(b.text for b in play.of("map the bramblewick hedge")[0].system)
    assert "badger" not in second
    # It is in memory all the same: the trunk's next turn recalls it.
    assert "badger sett by the stile" in "\n".join(b.text for b in play.of("trunk")[2].system)


async def test_a_fork_that_keeps_working_is_not_stopped_for_inactivity(tmp_path: Path) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("steady work"),)), echo_result("")]
    # Five steps of 0.15 s each: 0.75 s in all, never 0.4 s without output.
    steps: deque[Reply | str | ForkScript] = deque(
        Reply(text=f"step {n}", tool_calls=(("recall", {"query": f"step {n}"}),), wait_s=0.15)
        for n in range(5)
    )
    steps.append(complete("all five steps done"))
    play.forks["steady work"] = steps
    async with rig(tmp_path, play, inactivity_timeout_s=0.4) as r:
        result = await r.turn("go")
        row = (await ForkLineage(r.db).all())[0]
    assert row.status == "complete", row.stop_reason
    assert "all five steps done" in result.text


async def test_only_the_trunk_announces_compaction(tmp_path: Path) -> None:
    from daemon.events import CompactionApproaching
    from daemon.testing import static_context

    settings = Settings()
    clock = FakeClock(NOW)
    announced: list[str] = []
    async with await Database.open(tmp_path / "db.sqlite") as db:
        model = ScriptedModel(lambda _req: "fine")
        async with ModelRoles(
            settings,
            UsageLedger(db, settings.spend, clock),
            overrides={"trunk": model, "delegate": model},
        ) as roles:
            bus = EventBus()
            static_context(bus)
            bus.on(CompactionApproaching, lambda e: announced.append(e.session_id))
            async with bus:
                for kind, role in (("trunk", "trunk"), ("fork", "delegate")):
                    # A threshold every request crosses: only the trunk's wind-down may start from it.
                    loop = AgentLoop(
                        roles=roles,
                        tools=ToolRegistry(),
                        bus=bus,
                        clock=clock,
                        counter=TokenCounter(),
                        role=role,
                        session_kind=kind,
                        compaction_threshold=0.000001,
                    )
                    session = await Session.open(
                        db=db, directory=tmp_path, session_id=f"{kind}-1", kind=kind, now=NOW
                    )
                    with anyio.fail_after(10):
                        await loop.run_turn(
                            session,
                            turn_id=f"{kind}-t",
                            prompt="hello",
                            observer=lambda _e: None,
                            ts=NOW.isoformat(),
                        )
    assert announced == ["trunk-1"]


def test_status_shows_running_forks_and_counts() -> None:
    from daemon.cli.status import render

    text = render(
        {
            "state": "awake",
            "running": True,
            "forks": {
                "running": 2,
                "started": 5,
                "by_status": {"complete": 2, "stopped": 1, "running": 2},
            },
        }
    )
    assert "forks:        2 running · so far: 2 complete, 1 stopped" in text
    assert "forks:" not in render(
        {"state": "awake", "running": True, "forks": {"running": 0, "started": 0, "by_status": {}}}
    )


async def test_a_forks_brief_is_indexed_as_the_agents_words_never_the_persons(
    tmp_path: Path,
) -> None:
    play = Play()
    play.trunk += [Reply(tool_calls=(delegate("measure the greenhouse"),)), "ok"]
    play.forks["measure the greenhouse"] = deque(["The greenhouse measures twelve metres by four."])
    async with rig(tmp_path, play) as r:
        await r.turn("go")
        row = (await ForkLineage(r.db).all())[0]
        await r.memory.index_session(row.id)
        await r.memory.index_session(r.session.id)
        origins = await r.db.fetchall(
            "SELECT origin, text FROM memories WHERE kind = 'chunk' AND session_id = ?", (row.id,)
        )
        trunk = await r.db.fetchall(
            "SELECT origin FROM memories WHERE kind = 'chunk' AND session_id = ?", (r.session.id,)
        )
    briefs = [o for o, text in origins if "focused task mode" in text]
    assert briefs and set(briefs) == {"agent"}
    assert "person" not in {o for o, _ in origins}
    # The trunk's own user turns are still the person's.
    assert "person" in {o for (o,) in trunk}


def test_a_forks_streamed_text_is_cut_into_whole_lines() -> None:
    from daemon.delegate.running import SpokenLines

    lines = SpokenLines(width=20)
    assert lines.feed("Reading the ") == []
    assert lines.feed("notes.\n\nFound") == ["Reading the notes."]
    assert lines.feed(" three herons by the old boathouse today") == [
        "Found three herons",
        "by the old boathouse",
    ]
    assert lines.feed("x" * 45) == ["today" + "x" * 15, "x" * 20]
    assert lines.flush() == ["x" * 10] and lines.flush() == []
