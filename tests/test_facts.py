"""Explicit facts: remember / correct / retract, the facts log, duplicates, origins, dates."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path

import anyio
import pytest

from daemon.cli.memory import add_commands
from daemon.memory.dates import resolve_dates
from daemon.memory.facts import FactError, FactLog
from daemon.paths import Home
from daemon.tools.registry import ToolContext, ToolRegistry
from tests.memory_support import memory_system

pytestmark = pytest.mark.anyio


def log_events(root: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (root / "memory" / "facts.jsonl").read_text().splitlines()
        if line.strip()
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dentist appointment tomorrow", "dentist appointment tomorrow (2026-03-04)"),
        ("paid the rent yesterday", "paid the rent yesterday (2026-03-02)"),
        ("call mum next Friday", "call mum next Friday (2026-03-06)"),
        ("we met last week", "we met last week (week of 2026-02-23)"),
        ("renew passport in 3 days", "renew passport in 3 days (2026-03-06)"),
        ("review in two weeks", "review in two weeks (2026-03-17)"),
        ("gym on Monday", "gym on Monday (2026-03-09)"),
        ("I went to the gym on Monday", "I went to the gym on Monday (2026-03-02)"),
        ("standup this Tuesday", "standup this Tuesday (2026-03-03)"),
        ("budget next month", "budget next month (2026-04)"),
        ("it rained 3 days ago", "it rained 3 days ago (2026-02-28)"),
        ("tomorrow (2026-03-04) is pinned already", "tomorrow (2026-03-04) is pinned already"),
        ("Mondays are hard", "Mondays are hard"),
    ],
)
def test_relative_dates_are_pinned_keeping_the_wording(text: str, expected: str) -> None:
    assert resolve_dates(text, datetime(2026, 3, 3, 10, 0)) == expected


async def test_remember_stores_an_explicit_fact_in_the_log_the_index_and_memory_md(
    tmp_path: Path,
) -> None:
    async with memory_system(tmp_path) as memory:
        result = await memory.remember(
            "Dentist appointment tomorrow at 10", tags=["Health", "#dentist"]
        )
        assert result.status == "stored" and result.id == "fact:1"
        assert result.text == "Dentist appointment tomorrow (2026-03-04) at 10"
        item = await memory.index.get("fact:1")
        assert item is not None and item.kind == "fact" and item.origin == "person"
        assert item.meta["explicit"] is True and item.tags == ("health", "dentist")
        profile = await memory.remember("I prefer tea to coffee", target="profile")
        assert (await memory.index.get(profile.id)).kind == "profile"  # type: ignore[union-attr]
    events = log_events(tmp_path)
    assert [e["op"] for e in events] == ["remember", "remember"]
    assert (
        events[0]["wording"] == "Dentist appointment tomorrow at 10"
        and events[0]["origin"] == "person"
    )
    assert (
        "[fact:1] 2026-03-03 — Dentist appointment tomorrow (2026-03-04) at 10"
        in (tmp_path / "memory" / "MEMORY.md").read_text()
    )
    profile_md = (tmp_path / "memory" / "PROFILE.md").read_text()
    assert "I prefer tea to coffee" in profile_md and "Dentist" not in profile_md


async def test_exact_and_near_duplicates_are_not_stored_twice(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        first = await memory.remember(
            "My sister Ada lives in Lisbon and works as a marine biologist"
        )
        again = await memory.remember(
            "my sister ada lives in Lisbon, and works as a marine biologist!"
        )
        assert again.status == "duplicate" and again.id == first.id
        await memory.index.flush()
        near = await memory.remember(
            "My sister Ada lives in Lisbon and works as a marine biologist there"
        )
        assert near.status == "similar" and near.similar_to == first.id
        assert "use correct" in near.message
        other = await memory.remember("My brother Tom lives in Oslo")
        assert other.status == "stored"
    assert [e["id"] for e in log_events(tmp_path)] == ["fact:1", "fact:2"]


async def test_untrusted_origins_never_reach_the_profile(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        for origin in ("tool", "import"):
            with pytest.raises(FactError, match="untrusted"):
                await memory.remember(
                    "The user is an administrator", target="profile", origin=origin
                )
        stored = await memory.remember("The weather API said it will rain", origin="tool")
        assert stored.status == "stored"
        item = await memory.index.get(stored.id)
        assert item is not None and item.origin == "tool" and item.meta["untrusted"] is True
        own = await memory.remember("I am vegetarian", target="profile", origin="person")
        with pytest.raises(FactError, match="untrusted"):
            await memory.correct(own.id, "I eat meat", origin="tool")
        with pytest.raises(FactError, match="unknown origin"):
            await memory.remember("x y z", origin="martian")
        with pytest.raises(FactError, match="empty"):
            await memory.remember("   ")
        with pytest.raises(FactError, match="unknown target"):
            await memory.remember("a b c", target="diary")
    assert len(log_events(tmp_path)) == 2  # the refusals left no trace


async def test_correct_and_retract_are_append_only_with_history(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        old = await memory.remember("The team meeting is on Thursdays")
        new = await memory.correct(old.id, "The team meeting moved to Wednesdays", origin="person")
        assert new.status == "corrected" and new.id == "fact:2" and new.similar_to == "fact:1"
        old_item = await memory.index.get("fact:1")
        assert (
            old_item is not None
            and old_item.meta["retired_at"]
            and old_item.meta["superseded_by"] == "fact:2"
        )
        assert [i.id for i in await memory.index.history("fact:2")] == ["fact:1", "fact:2"]
        with pytest.raises(FactError, match="already corrected by fact:2"):
            await memory.correct("fact:1", "Fridays", origin="person")
        with pytest.raises(FactError, match="identical"):
            await memory.correct("fact:2", "the team meeting moved to wednesdays", origin="person")

        await memory.retract("fact:2", reason="the team was dissolved", origin="person")
        assert [i.id for i in await memory.view.recent_facts(5)] == []
        history = await memory.index.search("team meeting", include_retired=True)
        assert {"fact:1", "fact:2"} <= {i.id for i in history}
        with pytest.raises(FactError, match="retracted"):
            await memory.retract("fact:2", reason="again", origin="person")
        with pytest.raises(FactError, match="no fact with id"):
            await memory.retract("fact:99", reason="?", origin="person")
    events = log_events(tmp_path)
    assert [e["op"] for e in events] == ["remember", "correct", "retract"]
    assert events[1]["supersedes"] == "fact:1" and events[2]["reason"] == "the team was dissolved"
    assert "team meeting" not in (tmp_path / "memory" / "MEMORY.md").read_text()


async def test_the_log_is_the_truth_a_lost_index_is_rebuilt_and_torn_lines_are_survived(
    tmp_path: Path,
) -> None:
    async with memory_system(tmp_path) as memory:
        await memory.remember("Ada's birthday is on 12 May")
        await memory.remember("Ada's favourite colour is green")
        await memory.retract("fact:2", reason="wrong", origin="person")
    # A crash mid-append left half a line; then the database is lost entirely.
    with (tmp_path / "memory" / "facts.jsonl").open("a") as fh:
        fh.write('{"v": 1, "op": "remember", "id": "fact:3", "ts"')
    for name in ("reverie.db", "reverie.db-wal", "reverie.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    async with memory_system(tmp_path) as memory:
        item = await memory.index.get("fact:1")
        assert item is not None and "12 May" in item.text
        retired = await memory.index.get("fact:2")
        assert retired is not None and retired.meta["retired_at"]
        stored = await memory.remember("Ada plays the cello")
        assert stored.id == "fact:3"
    lines = (tmp_path / "memory" / "facts.jsonl").read_text().splitlines()
    assert (
        json.loads(lines[-1])["text"] == "Ada plays the cello"
    )  # on its own line, not glued to the torn one


async def test_a_restore_is_in_the_log_and_survives_a_lost_database(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        await memory.remember("Ada's birthday is on 12 May")
        await memory.retract("fact:1", reason="  not\nsure ", origin="person")
        restored = await memory.facts.restore("fact:1", origin="person", reason="")
        assert restored.active
        with pytest.raises(FactError, match="not retracted"):
            await memory.facts.restore("fact:1", origin="person")
    events = log_events(tmp_path)
    assert [(e["op"], e.get("reason")) for e in events[1:]] == [
        ("retract", "not sure"),
        ("restore", "restored"),
    ]
    for name in ("reverie.db", "reverie.db-wal", "reverie.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    async with memory_system(tmp_path) as memory:
        item = await memory.index.get("fact:1")
        assert item is not None and not item.meta.get("retired_at")


def test_two_writers_allocate_distinct_ids(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    a, b = FactLog(path), FactLog(path)
    ids = []
    for i in range(6):
        writer = a if i % 2 else b
        ids.append(
            writer.append(
                {"op": "remember", "id": None, "ts": "2026-03-03T10:00:00+00:00", "text": f"t{i}"}
            )["id"]
        )
    assert ids == [f"fact:{n}" for n in range(1, 7)]
    a.refresh()
    assert len(a.facts) == 6


async def test_memory_tools_store_as_agent_and_report_refusals_as_tool_errors(
    tmp_path: Path,
) -> None:
    async with memory_system(tmp_path) as memory:
        registry = ToolRegistry()
        for tool in memory.tools():
            registry.register(tool)
        assert registry.names() == [
            "correct",
            "recall",
            "recall_session",
            "remember",
            "remember_session",
            "retract",
        ]
        ctx = ToolContext(session_id="s1", turn_id="t1")
        ok = await registry.call(
            "remember", {"text": "Meeting Bob on Friday", "tags": ["work"]}, ctx
        )
        assert not ok.is_error and "fact:1" in ok.content and "(2026-03-06)" in ok.content
        assert (await memory.index.get("fact:1")).origin == "agent"  # type: ignore[union-attr]
        bad = await registry.call("remember", {"text": "x", "target": "diary"}, ctx)
        assert bad.is_error
        fixed = await registry.call(
            "correct", {"id": "fact:1", "text": "Meeting Bob on Saturday"}, ctx
        )
        assert not fixed.is_error and "fact:2" in fixed.content
        gone = await registry.call("retract", {"id": "fact:7", "reason": "?"}, ctx)
        assert gone.is_error and "no fact with id" in gone.content
        done = await registry.call("retract", {"id": "fact:2", "reason": "cancelled"}, ctx)
        assert not done.is_error


async def test_remember_cli_stores_corrects_and_retracts_as_person(
    home_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (home_dir / "reverie.toml").open("a") as fh:
        fh.write('\n[memory]\nembedder = "none"\n')
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home")
    common.add_argument("--config")
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(), common)

    async def run(*argv: str) -> int:
        args = parser.parse_args([*argv, "--home", str(home_dir)])
        with anyio.fail_after(30):
            return await args.func(args)

    assert await run("remember", "I live in Porto", "--target", "profile") == 0
    assert "remembered as fact:1" in capsys.readouterr().out
    assert await run("remember", "--correct", "fact:1", "I live in Braga", "--json") == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])  # log lines go first
    assert out["status"] == "corrected" and out["id"] == "fact:2"
    assert await run("remember", "--retract", "fact:2", "--reason", "moved again") == 0
    from daemon.cli.support import CommandError

    with pytest.raises(CommandError, match="no fact with id"):
        await run("remember", "--retract", "fact:9")
    with pytest.raises(CommandError, match="needs TEXT"):
        await run("remember")
    events = log_events(Home(home_dir).root)
    assert [(e["op"], e["origin"]) for e in events] == [
        ("remember", "person"),
        ("correct", "person"),
        ("retract", "person"),
    ]
