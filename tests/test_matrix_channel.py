"""The Matrix channel against a real Synapse: the person talks to the daemon through a second
real client; a stranger is ignored; a restart answers nothing twice and catches up on what was
sent while the daemon was down."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from daemon.channels.matrix_api import TIMELINE_LIMIT
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import FAKE_API_CONFIG, DaemonProcess, daemon_env, wait_until
from tests.matrix_server import Account, Synapse, synapse  # noqa: F401


def _setup(
    server: Synapse, tmp_path: Path, *, toml: str = "", env: dict[str, str] | None = None
) -> tuple[Account, Account, Account, str, DaemonProcess]:
    tag = uuid.uuid4().hex[:8]
    bot = server.register(f"bot{tag}")
    person = server.register(f"person{tag}")
    stranger = server.register(f"stranger{tag}")
    room = server.create_room(person, [bot.user_id, stranger.user_id])
    server.join(stranger, room)
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        f"""
[channels.matrix]
enabled = true
homeserver = "{server.url}"
user_id = "{bot.user_id}"
rooms = ["{room}"]
allow = ["{person.user_id}"]
{toml}"""
    )
    extra = {"REVERIE_MATRIX_TOKEN": bot.access_token, **(env or {})}
    return bot, person, stranger, room, DaemonProcess(home=home, env=daemon_env(extra))


def _from(server: Synapse, reader: Account, room: str, sender: str) -> list[dict[str, Any]]:
    return [e for e in server.messages(reader, room) if e["sender"] == sender]


def _joined(server: Synapse, reader: Account, room: str) -> set[str]:
    reply = server.request(
        "GET", f"/_matrix/client/v3/rooms/{room}/joined_members", token=reader.access_token
    )
    return set(reply.get("joined", {}))


def test_person_answered_once_stranger_ignored_restart_catches_up(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        state = daemon.home / "channels" / "matrix"
        wait_until(lambda: bot.user_id in _joined(synapse, person, room), 30, "the bot to join")
        wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
        position_before = (state / "sync.json").read_text()

        synapse.send_text(stranger, room, "hello bot, I am not your person")
        synapse.send_text(person, room, "hello from Matrix")
        wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 1, 60, "a reply")
        time.sleep(1.5)  # a second reply would be on its way by now
        replies = _from(synapse, person, room, bot.user_id)
        assert len(replies) == 1, [r["content"] for r in replies]
        assert replies[0]["content"]["msgtype"] == "m.text"
        assert replies[0]["content"]["body"].strip()
        ignored = [e for e in daemon.log_events() if "not allowed" in str(e.get("event", ""))]
        assert [e.get("sender") for e in ignored] == [stranger.user_id]
        # The person's message is in the trunk's transcript as theirs; the stranger's is not.
        transcripts = "".join(
            p.read_text() for p in (daemon.home / "sessions" / "trunk").glob("*.jsonl")
        )
        assert "hello from Matrix" in transcripts
        assert "not your person" not in transcripts

        daemon.stop()
        # A replayed sync: the position goes back to before the first message, so the next
        # sync brings it (and its answer) again; only the message sent meanwhile is new.
        (state / "sync.json").write_text(position_before)
        synapse.send_text(person, room, "sent while you were away")
        daemon.start(timeout=30)
        wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 2, 60, "the catch-up")
        time.sleep(2.0)
        replies = _from(synapse, person, room, bot.user_id)
        assert len(replies) == 2, [r["content"] for r in replies]
        # The catch-up reply comes after the message sent while the daemon was down.
        timeline = [e for e in synapse.messages(person, room)]
        order = [(e["sender"], e["content"].get("body", "")) for e in timeline]
        away = order.index((person.user_id, "sent while you were away"))
        assert order[away + 1][0] == bot.user_id, order
        seen = [json.loads(line) for line in (state / "seen.jsonl").read_text().splitlines()]
        taken = [r for r in seen if r["turn"]]
        assert len(taken) == 2 and len({r["event"] for r in seen}) == len(seen)
    finally:
        daemon.stop()


# Each starts its own Synapse (~15 s): run with `-m slow` until the server is shared.
@pytest.mark.slow
def test_the_homeserver_killed_and_back_mid_conversation(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        state = daemon.home / "channels" / "matrix"
        wait_until(lambda: bot.user_id in _joined(synapse, person, room), 30, "the bot to join")
        wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
        synapse.send_text(person, room, "first, before the outage")
        wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) == 1, 60, "a reply")

        synapse.stop()
        wait_until(
            lambda: any("homeserver away" in str(e.get("event")) for e in daemon.log_events()),
            60,
            "the channel to notice the homeserver is gone",
        )
        synapse.start()
        synapse.send_text(person, room, "second, after the outage")
        wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 2, 90, "the reply")
        time.sleep(1.5)
        bodies = [e["content"]["body"] for e in _from(synapse, person, room, bot.user_id)]
        assert len(bodies) == 2, bodies
        assert "second, after the outage" in bodies[1]  # the offline model quotes the message
        assert daemon.proc is not None and daemon.proc.poll() is None
    finally:
        daemon.stop()


def _typing(server: Synapse, reader: Account, room: str) -> set[str]:
    reply = server.request("GET", "/_matrix/client/v3/sync?timeout=0", token=reader.access_token)
    events = reply.get("rooms", {}).get("join", {}).get(room, {}).get("ephemeral", {})
    typing = [e for e in events.get("events", []) if e.get("type") == "m.typing"]
    return set(typing[-1]["content"]["user_ids"]) if typing else set()


# Each starts its own Synapse (~15 s): run with `-m slow` until the server is shared.
@pytest.mark.slow
def test_a_restart_during_a_reply_answers_once_after_it(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        # The first answer never comes (the daemon is killed while it waits); the second does.
        fake.enqueue(
            Planned.delayed(60, "the reply that was cut off"), "the reply after the restart"
        )
        bot, person, _stranger, room, daemon = _setup(
            synapse,
            tmp_path,
            toml=FAKE_API_CONFIG,
            env={"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url},
        )
        daemon.start(timeout=30)
        try:
            state = daemon.home / "channels" / "matrix"
            wait_until(lambda: bot.user_id in _joined(synapse, person, room), 30, "the join")
            wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
            synapse.send_text(person, room, "a question that takes a while")
            wait_until(
                lambda: any(r.body.get("tools") for r in fake.message_requests),
                30,
                "the trunk to ask the model",
            )
            # The bot shows it is typing while the turn runs.
            wait_until(lambda: bot.user_id in _typing(synapse, person, room), 30, "typing")
            daemon.kill()
            assert _from(synapse, person, room, bot.user_id) == []
            daemon.start(timeout=30)
            wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 1, 60, "reply")
            time.sleep(1.5)
            bodies = [e["content"]["body"] for e in _from(synapse, person, room, bot.user_id)]
            assert bodies == ["the reply after the restart"]

            wait_until(lambda: bot.user_id not in _typing(synapse, person, room), 30, "typing off")
        finally:
            daemon.stop()


# Each starts its own Synapse (~15 s): run with `-m slow` until the server is shared.
@pytest.mark.slow
def test_an_approval_is_asked_and_answered_in_the_room(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    with FakeAnthropic() as fake:
        fake.enqueue(
            Planned.tool("write_file", {"path": "note.txt", "content": "written via Matrix"}),
            "the note is written",
        )
        bot, person, _stranger, room, daemon = _setup(
            synapse,
            tmp_path,
            toml='[tools]\ntrunk = ["write_file", "read_file"]\n' + FAKE_API_CONFIG,
            env={"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url},
        )
        daemon.start(timeout=30)
        try:
            state = daemon.home / "channels" / "matrix"
            wait_until(lambda: bot.user_id in _joined(synapse, person, room), 30, "the join")
            wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
            synapse.send_text(person, room, "please write the note")
            wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 1, 60, "question")
            question = _from(synapse, person, room, bot.user_id)[0]["content"]
            assert question["msgtype"] == "m.notice"
            assert "Approval needed" in question["body"] and "note.txt" in question["body"]
            assert not (daemon.home / "workspace" / "note.txt").exists()
            synapse.send_text(person, room, "yes")
            wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) >= 2, 60, "reply")
            time.sleep(1.0)
            bodies = [e["content"]["body"] for e in _from(synapse, person, room, bot.user_id)]
            assert bodies[1:] == ["the note is written"], bodies
            assert (daemon.home / "workspace" / "note.txt").read_text() == "written via Matrix"
            # The answer settled the question; it never became a message of its own.
            seen = [json.loads(x) for x in (state / "seen.jsonl").read_text().splitlines()]
            assert len([r for r in seen if r["turn"]]) == 1
            assert len(fake.message_requests) == 2
        finally:
            daemon.stop()


# Each starts its own Synapse (~15 s): run with `-m slow` until the server is shared.
@pytest.mark.slow
def test_more_sent_while_down_than_one_sync_carries_is_answered_in_order(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        state = daemon.home / "channels" / "matrix"
        wait_until(lambda: bot.user_id in _joined(synapse, person, room), 30, "the bot to join")
        wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
        daemon.stop()
        count = TIMELINE_LIMIT + 5  # a gap: the next sync is `limited`
        for i in range(count):
            synapse.send_text(person, room, f"backlog {i:02d}")
        daemon.start(timeout=30)
        wait_until(
            lambda: len(_from(synapse, person, room, bot.user_id)) >= count, 120, "the backlog"
        )
        time.sleep(1.5)
        bodies = [e["content"]["body"] for e in _from(synapse, person, room, bot.user_id)]
        assert len(bodies) == count
        # Answered in the order sent (the offline model quotes each message).
        assert [f"backlog {i:02d}" in b for i, b in enumerate(bodies)] == [True] * count
        assert any("gap filled" in str(e.get("event")) for e in daemon.log_events())
    finally:
        daemon.stop()
