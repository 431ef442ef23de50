"""The standing checklist (HEARTBEAT.md), checked by a fork with the forks' tools (issue 23).

Through the real daemon and the fake Messages API: the fork reads the file the item names and
its finding reaches a connected client as a notice; "nothing to report" posts nothing; an
absent or empty checklist costs no request. In-process (a scripted model): quiet hours, the
cadence, what it already told the person today, the spend cap, a tool nobody is there to
approve, and the reporting convention.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.clock import FakeClock
from daemon.events import Heartbeat
from daemon.models.base import ModelRequest, Usage
from daemon.schedule.checklist import NOTHING, TASK, StandingChecklist, finding
from daemon.settings import (
    NoticesSettings,
    PermissionsSettings,
    SchedulerSettings,
    Settings,
    SleepSettings,
    SpendSettings,
)
from daemon.testing import Reply, ScriptedModel
from tests.fakes.anthropic_server import FakeAnthropic, Planned, RecordedRequest
from tests.harness import OFFLINE_ROLES, Client, DaemonProcess, daemon_env
from tests.harness import wait_until as wait_for
from tests.sleep_support import Rig, rig

FRAMING = "You are in focused task mode. Your objective is: "
ITEM = "- check whether build/status.txt says FAILED"

CONFIG = (
    """
[scheduler]
timezone = "UTC"

[journal]
heartbeat_minutes = {heartbeat}

[notices]
checklist_minutes = {every}

[sleep]
nightly = false

# Only the checklist's fork talks to the fake, so every request it sees is the fork's.
"""
    + OFFLINE_ROLES
)


def _tool_results(body: dict[str, Any]) -> list[str]:
    """The text of every tool result the request carries, oldest first."""
    out = []
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") != "tool_result":
                continue
            inner = block.get("content")
            if isinstance(inner, list):
                inner = " ".join(b.get("text", "") for b in inner if isinstance(b, dict))
            out.append(str(inner or ""))
    return out


class CheckingFake(FakeAnthropic):
    """The fake Messages API as the checklist's fork: it reads the status file, then reports.

    Its finding is what the file said, so a notice can only carry it if the file was read.
    """

    def __init__(self, status_file: Path) -> None:
        super().__init__()
        self.status_file = status_file

    def _take(self, body: dict[str, Any]) -> Planned:
        if not is_check(body):
            return super()._take(body)
        results = _tool_results(body)
        if not results:
            return Planned.tool("read_file", {"path": str(self.status_file)})
        failed = [line for line in results[-1].splitlines() if "FAILED" in line]
        if failed:
            said = failed[0].split("\t", 1)[-1].strip()
            summary = f"The build is red: status.txt says “{said}”."
        else:
            summary = f"{NOTHING}: the build status is fine."
        return Planned.tool("task_complete", {"summary": summary, "outcome": "success"})

    def checks(self) -> list[RecordedRequest]:
        return [r for r in self.message_requests if is_check(r.body)]


def is_check(body: dict[str, Any]) -> bool:
    """A request of the checklist's fork (a summary of its transcript quotes the brief too)."""
    first = json.dumps((body.get("messages") or [])[:1])
    forked = any(t.get("name") == "task_complete" for t in body.get("tools") or [])
    return forked and FRAMING in first and TASK in first


def _rows(home: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql)]
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def _checks_done(home: Path) -> list[tuple[Any, ...]]:
    return _rows(
        home,
        "SELECT id, status, outcome, summary, parent_session_id, transcript_path FROM forks"
        " WHERE parent_turn_id LIKE 'checklist-%' AND status != 'running' ORDER BY started_at",
    )


def _notices(home: Path) -> list[tuple[Any, ...]]:
    return _rows(home, "SELECT kind, text FROM notices ORDER BY rowid")


def test_the_fork_reads_the_build_status_and_its_finding_reaches_the_person(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    status = home / "workspace" / "build" / "status.txt"
    status.parent.mkdir(parents=True)
    status.write_text("build 41: passed\n")
    (home / "reverie.toml").write_text(CONFIG.format(heartbeat=0.02, every=0.02))
    (home / "HEARTBEAT.md").write_text(f"# Checklist\n<!-- on each heartbeat -->\n{ITEM}\n")
    with CheckingFake(status) as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env)
        d.start()
        try:
            with Client(d.socket_path, timeout=30) as person:
                assert person.hello()["type"] == "hello"
                # The build is green: checks run, and cost no notice.
                wait_for(lambda: len(_checks_done(home)) >= 2, 30, "two checks, green build")
                assert _notices(home) == []
                # The build goes red: the next check reads it and the person is told at once.
                status.write_text("build 42: FAILED (test_login)\n")
                frames = person.recv_until(lambda f: f["type"] == "notice")
                assert [f for f in frames if f["type"] == "notice"] == frames[-1:]
                notice = frames[-1]
                assert notice["kind"] == "checklist"
                assert (
                    notice["text"]
                    == "The build is red: status.txt says “build 42: FAILED (test_login)”."
                )
                # Still red at the next checks: told once (the same text is never posted twice a day).
                seen = len(_checks_done(home))
                wait_for(lambda: len(_checks_done(home)) >= seen + 2, 30, "two more checks")
            assert _notices(home) == [("checklist", notice["text"])]
        finally:
            d.stop()
    checks = fake.checks()
    first = checks[0].body
    # The fork's tools (the work tools and task_complete), its brief the item, not the heading.
    offered = {t["name"] for t in first["tools"]}
    assert {"read_file", "list_files", "search_files", "run", "task_complete"} <= offered
    brief = json.dumps(first["messages"][0])
    assert "check whether build/status.txt says FAILED" in brief
    assert "on each heartbeat" not in brief and "# Checklist" not in brief
    # Each check read the real file: the tool result is its content.
    assert any("build 41: passed" in r for r in _tool_results(checks[1].body))
    assert any("FAILED (test_login)" in r for c in checks for r in _tool_results(c.body))
    # Each check is a fork of the trunk's session like any other: lineage, transcript, summary.
    forks = _checks_done(home)
    assert {f[1] for f in forks} == {"complete"} and {f[2] for f in forks} == {"success"}
    assert any(f[3].startswith(NOTHING) for f in forks)
    trunk = _rows(home, "SELECT value FROM kv WHERE key = 'trunk_session'")
    assert trunk and {f[4] for f in forks} == {json.loads(trunk[0][0])}
    assert all(Path(f[5]).exists() for f in forks)
    summarised = _rows(
        home, "SELECT COUNT(*) FROM sessions WHERE kind = 'fork' AND summary_path IS NOT NULL"
    )
    assert summarised[0][0] >= 1


def test_an_absent_or_empty_checklist_costs_no_request(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG.format(heartbeat=0.01, every=0.01))
    status = home / "workspace" / "build" / "status.txt"
    with CheckingFake(status) as fake:
        env = daemon_env({"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        d = DaemonProcess(home=home, env=env)
        d.start()
        try:

            def heartbeats() -> int:
                return sum(
                    1
                    for e in d.log_events()
                    if e.get("event") == "job finished" and e.get("job") == "heartbeat"
                )

            wait_for(lambda: heartbeats() >= 2, 20, "two heartbeats with no checklist")
            (home / "HEARTBEAT.md").write_text("# Checklist\n\n<!-- nothing yet -->\n\n")
            seen = heartbeats()
            wait_for(lambda: heartbeats() >= seen + 2, 20, "two heartbeats, empty checklist")
            assert fake.requests == []
            assert _rows(home, "SELECT COUNT(*) FROM forks") == [(0,)]
            # The same daemon with one instruction: a check on the next heartbeat.
            (home / "HEARTBEAT.md").write_text(ITEM + "\n")
            wait_for(lambda: fake.checks(), 20, "the checklist's fork")
        finally:
            d.stop()


# --- in-process: the rules around a check ---------------------------------------------------


def _said(request: ModelRequest) -> str:
    return "\n".join(
        getattr(b, "text", "") or str(getattr(b, "content", ""))
        for m in request.messages
        for b in m.content
    )


def _settings(**notices: Any) -> Settings:
    return Settings(
        scheduler=SchedulerSettings(timezone="Europe/London"),
        sleep=SleepSettings(nightly=False),
        # Checked by the checklist built in the test, not the daemon's own.
        notices=NoticesSettings(checklist=False, **notices),
        permissions=PermissionsSettings(approval_timeout_s=5),
    )


def _checklist(r: Rig, **kw: Any) -> StandingChecklist:
    s = r.services
    return StandingChecklist(
        home=r.home,
        db=r.db,
        roles=r.roles,
        outbox=s.outbox,
        delegator=s.delegator,
        trunk_session=lambda: r.trunk.session.id if r.trunk.session else None,
        zone=s.schedules.zone,
        now=r.clock.now,
        every_minutes=30,
        ledger=s.ledger,
        quiet=s.courier.in_quiet_hours,
        **kw,
    )


async def _beat(checklist: StandingChecklist, at: datetime) -> bool:
    started = await checklist.on_heartbeat(Heartbeat(at=at))
    await checklist.settled()
    return started


@pytest.mark.anyio
async def test_quiet_hours_the_cadence_and_what_it_already_said_today(tmp_path: Path) -> None:
    answers = [
        "The build is red: test_login fails.",
        f"{NOTHING} (already told them).",
    ]

    def fork(request: ModelRequest) -> Reply:
        return Reply(
            tool_calls=(("task_complete", {"summary": answers.pop(0), "outcome": "success"}),)
        )

    model = ScriptedModel(fork)
    clock = FakeClock(datetime(2026, 3, 3, 6, 0, tzinfo=UTC))  # 06:00 in London: quiet
    settings = _settings(quiet_hours="22:00-07:00")
    with anyio.fail_after(60):
        async with rig(
            tmp_path / "home", settings=settings, clock=clock, models={"delegate": model}
        ) as r:
            (r.home.root / "HEARTBEAT.md").write_text("- Tell me when the build is red.\n")
            async with _checklist(r) as checklist:
                assert not await _beat(checklist, clock.now())
                assert model.calls == []
                clock.set(datetime(2026, 3, 3, 7, 5, tzinfo=UTC))
                assert await _beat(checklist, clock.now())
                assert len(model.calls) == 1
                [told] = await r.services.outbox.pending()
                assert (told.kind, told.text) == (
                    "checklist",
                    "The build is red: test_login fails.",
                )
                # Within checklist_minutes: no call.
                clock.advance(minutes=20)
                assert not await _beat(checklist, clock.now())
                clock.advance(minutes=20)
                assert await _beat(checklist, clock.now())
                assert len(model.calls) == 2
                already = _said(model.calls[1]).split("ALREADY TOLD THEM TODAY:")[1]
                assert "The build is red: test_login fails." in already
                assert [n.id for n in await r.services.outbox.pending()] == [told.id]
                turns = await r.rows("SELECT parent_turn_id, status FROM forks ORDER BY started_at")
                assert [t[1] for t in turns] == ["complete", "complete"]
                assert all(t[0].startswith("checklist-20260303T") for t in turns)


@pytest.mark.anyio
async def test_over_the_spend_cap_nothing_is_checked(tmp_path: Path) -> None:
    model = ScriptedModel(
        lambda request: Reply(
            tool_calls=(("task_complete", {"summary": "x", "outcome": "success"}),)
        )
    )
    clock = FakeClock(datetime(2026, 3, 3, 12, 0, tzinfo=UTC))
    settings = _settings().model_copy(update={"spend": SpendSettings(daily_cap_usd=3.0)})
    with anyio.fail_after(60):
        async with rig(
            tmp_path / "home", settings=settings, clock=clock, models={"delegate": model}
        ) as r:
            (r.home.root / "HEARTBEAT.md").write_text("- Tell me when the build is red.\n")
            # Today's spend is at the cap (1 M input tokens of sonnet: $3 of $3).
            await r.services.ledger.record(
                role="trunk",
                provider="anthropic",
                model="claude-sonnet-4-5",
                usage=Usage(input_tokens=1_000_000, output_tokens=0),
            )
            async with _checklist(r) as checklist:
                assert not await _beat(checklist, clock.now())
            assert model.calls == []


@pytest.mark.anyio
async def test_a_tool_nobody_is_there_to_approve_is_refused_and_the_fork_says_so(
    tmp_path: Path,
) -> None:
    def fork(request: ModelRequest) -> Reply:
        results = [
            b for m in request.messages for b in m.content if type(b).__name__ == "ToolResultBlock"
        ]
        if not results:
            return Reply(tool_calls=(("run", {"command": "cat build/status.txt"}),))
        refusal = str(getattr(results[-1], "content", ""))
        return Reply(
            tool_calls=(
                (
                    "task_complete",
                    {
                        "summary": f"I could not run the build check: {refusal[:120]}",
                        "outcome": "failed",
                    },
                ),
            )
        )

    model = ScriptedModel(fork)
    clock = FakeClock(datetime(2026, 3, 3, 12, 0, tzinfo=UTC))
    with anyio.fail_after(60):
        async with rig(
            tmp_path / "home", settings=_settings(), clock=clock, models={"delegate": model}
        ) as r:
            (r.home.root / "HEARTBEAT.md").write_text("- Run the build check.\n")
            async with _checklist(r) as checklist:
                assert await _beat(checklist, clock.now())
            [told] = await r.services.outbox.pending()
    assert told.kind == "checklist"
    assert told.text.startswith("Part of the checklist could not be checked: I could not run")
    assert "approval" in told.text


@pytest.mark.parametrize(
    ("summary", "outcome", "told"),
    [
        ("NOTHING TO REPORT", "success", None),
        ("Nothing to report.", "success", None),
        ("**NOTHING TO REPORT** — the build is green.", "success", None),
        ("", "success", None),
        ("The build is red.", "success", "The build is red."),
        (
            "The build is red.",
            "partial",
            "Part of the checklist could not be checked: The build is red.",
        ),
        (
            "NOTHING TO REPORT: the log could not be read.",
            "failed",
            "Part of the checklist could not be checked: the log could not be read.",
        ),
        ("x" * 700, "success", "x" * 599 + "…"),
    ],
)
def test_what_a_summary_tells_the_person(summary: str, outcome: str, told: str | None) -> None:
    assert finding(summary, outcome) == told


@pytest.mark.anyio
async def test_one_check_at_a_time_and_the_heartbeat_does_not_wait_for_it(tmp_path: Path) -> None:
    # The fork's model answers slowly: a heartbeat meanwhile neither waits nor starts another.
    model = ScriptedModel(
        lambda request: Reply(
            wait_s=1.0,
            tool_calls=(("task_complete", {"summary": NOTHING, "outcome": "success"}),),
        )
    )
    clock = FakeClock(datetime(2026, 3, 3, 12, 0, tzinfo=UTC))
    with anyio.fail_after(60):
        async with rig(
            tmp_path / "home", settings=_settings(), clock=clock, models={"delegate": model}
        ) as r:
            (r.home.root / "HEARTBEAT.md").write_text("- Tell me when the build is red.\n")
            async with _checklist(r) as checklist:
                started = anyio.current_time()
                assert await checklist.on_heartbeat(Heartbeat(at=clock.now()))
                assert anyio.current_time() - started < 0.5 and checklist.running
                clock.advance(minutes=31)
                assert not await checklist.on_heartbeat(Heartbeat(at=clock.now()))
                await checklist.settled()
                assert not checklist.running
                assert await _beat(checklist, clock.now())
            assert len(model.calls) == 2
            assert await r.services.outbox.pending() == []
