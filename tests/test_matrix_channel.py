"""The Matrix channel against a real Synapse: the person talks to the daemon through a second
real client; a stranger is ignored; a restart answers nothing twice and catches up on what was
sent while the daemon was down."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from daemon.channels.matrix_api import TIMELINE_LIMIT
from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import FAKE_API_CONFIG, Client, DaemonProcess, daemon_env, run_cli, wait_until
from tests.matrix_server import Account, Synapse, channel_toml, synapse  # noqa: F401


def _setup(
    server: Synapse,
    tmp_path: Path,
    *,
    toml: str = "",
    env: dict[str, str] | None = None,
    encrypted: bool = False,
) -> tuple[Account, Account, Account, str, DaemonProcess]:
    tag = uuid.uuid4().hex[:8]
    bot = server.register(f"bot{tag}")
    person = server.register(f"person{tag}")
    stranger = server.register(f"stranger{tag}")
    room = server.create_room(person, [bot.user_id, stranger.user_id], encrypted=encrypted)
    server.join(stranger, room)
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(channel_toml(server, bot, room, person, toml))
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
        state = _ready(synapse, bot, person, room, daemon)
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


# The Synapse is shared (session fixture); this test's own daemon, restarts and waits cost
# ~15-30 s on 2 cores. One of the named checks: it runs in the default suite.
def test_the_homeserver_killed_and_back_mid_conversation(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)
        synapse.send_text(person, room, "first, before the outage")
        wait_until(lambda: len(_from(synapse, person, room, bot.user_id)) == 1, 60, "a reply")

        synapse.stop()
        wait_until(
            lambda: any("homeserver away" in str(e.get("event")) for e in daemon.log_events()),
            60,
            "the channel to notice the homeserver is gone",
        )
        # Status says so, with the backoff before the next try; doctor warns.
        away = json.loads(_cli(daemon, "status", "--json"))["matrix"]
        assert away["state"] == "away" and away["backoff_s"] > 0 and away["retry_at"], away
        assert "matrix:       away" in _cli(daemon, "status")
        assert "[warn] matrix: away in the daemon" in _cli(daemon, "doctor")
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


# The Synapse is shared (session fixture); this test's own daemon, restarts and waits cost
# ~15-30 s on 2 cores. One of the named checks: it runs in the default suite.
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
            _ready(synapse, bot, person, room, daemon)
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


# The Synapse is shared (session fixture); this test's own daemon, restarts and waits cost
# ~15-30 s on 2 cores. One of the named checks: it runs in the default suite.
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
            state = _ready(synapse, bot, person, room, daemon)
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


# The Synapse is shared (session fixture); this test's own daemon, restarts and waits cost
# ~15-30 s on 2 cores, so it runs with `-m slow`.
@pytest.mark.slow
def test_more_sent_while_down_than_one_sync_carries_is_answered_in_order(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)
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


def _cli(daemon: DaemonProcess, *args: str) -> str:
    out = run_cli(*args, "--home", str(daemon.home), env=daemon.env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _delivered(daemon: DaemonProcess, text: str) -> bool:
    conn = sqlite3.connect(f"file:{daemon.home / 'reverie.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT delivered_at FROM notices WHERE text = ?", (text,)).fetchall()
    finally:
        conn.close()
    return len(rows) == 1 and rows[0][0] is not None


def _ready(server: Synapse, bot: Account, person: Account, room: str, d: DaemonProcess) -> Path:
    """Wait for the started daemon's bot to join `room` and sync once; its channel state dir."""
    state = d.home / "channels" / "matrix"
    wait_until(lambda: bot.user_id in _joined(server, person, room), 30, "the bot to join")
    wait_until(lambda: (state / "sync.json").exists(), 30, "the first sync")
    return state


def _bodies(server: Synapse, person: Account, room: str, bot: Account) -> list[str]:
    return [e["content"].get("body", "") for e in _from(server, person, room, bot.user_id)]


def test_reminders_reach_the_room_once_when_no_chat_is_open_and_status_shows_the_channel(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path)
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)
        # No local client is open: the reminder goes to the room, once, as a notice.
        _cli(daemon, "schedule", "add", "in", "2", "seconds", "water the plants")
        wait_until(lambda: _bodies(synapse, person, room, bot), 30, "the reminder in the room")
        wait_until(lambda: _delivered(daemon, "water the plants"), 10, "marked delivered")
        time.sleep(1.5)
        (reminder,) = _from(synapse, person, room, bot.user_id)
        assert reminder["content"] == {"msgtype": "m.notice", "body": "Reminder: water the plants"}

        status = json.loads(_cli(daemon, "status", "--json"))["matrix"]
        assert status["state"] == "connected" and status["notices_sent"] == 1, status
        assert status["notice_room"] == room and status["backoff_s"] is None
        assert f"matrix:       connected · {bot.user_id}" in _cli(daemon, "status")
        assert "[  ok] matrix: connected in the daemon as " + bot.user_id in _cli(daemon, "doctor")

        # A chat is open and shows it (answers `seen`): the room gets nothing, then or later.
        with Client(daemon.socket_path, timeout=30) as chat:
            chat.hello()
            _cli(daemon, "schedule", "add", "in", "2", "seconds", "stretch your legs")
            notice = chat.recv_until(lambda f: f.get("type") == "notice")[-1]
            assert notice["text"] == "stretch your legs"
            chat.send({"type": "seen", "ids": [notice["id"]]})
            wait_until(lambda: _delivered(daemon, "stretch your legs"), 10, "seen")
        # A connection that takes the notice but never shows it (a command's, a crashed chat):
        # when it closes, the room gets what it did not show.
        with Client(daemon.socket_path, timeout=30) as quiet:
            quiet.hello()
            _cli(daemon, "schedule", "add", "in", "2", "seconds", "call the bank")
            quiet.recv_until(lambda f: f.get("type") == "notice")
            time.sleep(1.0)
            assert len(_bodies(synapse, person, room, bot)) == 1
        wait_until(lambda: len(_bodies(synapse, person, room, bot)) == 2, 30, "the unshown one")
        time.sleep(1.5)
        assert _bodies(synapse, person, room, bot) == [
            "Reminder: water the plants",
            "Reminder: call the bank",
        ]
        assert _delivered(daemon, "call the bank")
    finally:
        daemon.stop()


def _wire(person: Any, room: str, bot: Account) -> list[dict[str, Any]]:
    return person.events_from(room, bot.user_id)


def test_an_encrypted_room_is_answered_encrypted_and_keeps_its_device_across_a_restart(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    from tests.matrix_person import EncryptingPerson  # the dev extra's matrix-nio

    bot, person, stranger, room, daemon = _setup(synapse, tmp_path, encrypted=True)
    crypto = daemon.home / "channels" / "matrix" / "crypto"
    me = EncryptingPerson(synapse, person, tmp_path / "person-keys")
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)
        # The bot's device (the access token's) publishes its keys; the person's client sees it.
        wait_until(lambda: bot.device_id in me.device_keys(bot.user_id), 30, "the bot's keys")
        fingerprint = me.device_keys(bot.user_id)[bot.device_id]

        sent = me.send_text(room, "hello, encrypted")
        raw = synapse.request(
            "GET", f"/_matrix/client/v3/rooms/{room}/event/{sent}", token=bot.access_token
        )
        assert raw["type"] == "m.room.encrypted" and "body" not in raw["content"]
        wait_until(lambda: _wire(me, room, bot), 60, "the encrypted reply")
        time.sleep(1.5)  # a second reply would be on its way by now
        (reply,) = _wire(me, room, bot)
        # Encrypted on the wire, and the person's client reads the daemon's reply in it (the
        # offline model quotes the message it was given: the daemon decrypted it).
        assert reply["type"] == "m.room.encrypted", reply
        assert reply["msgtype"] == "m.text" and "hello, encrypted" in reply["body"], reply
        transcripts = "".join(p.read_text() for p in daemon.home.glob("sessions/trunk/*.jsonl"))
        assert "hello, encrypted" in transcripts

        status = json.loads(_cli(daemon, "status", "--json"))["matrix"]
        e2ee = status["e2ee"]
        assert e2ee["on"] and e2ee["rooms"] == [room] and status["encrypted_rooms"] == []
        assert e2ee["device_id"] == bot.device_id
        assert e2ee["ed25519"].replace(" ", "") == fingerprint
        assert e2ee["ed25519"] in _cli(daemon, "status")
        assert e2ee["ed25519"] in _cli(daemon, "doctor")
        # The keys are the home's alone: the directory 0700, every file in it 0600.
        assert crypto.stat().st_mode & 0o777 == 0o700
        modes = {p.name: p.stat().st_mode & 0o777 for p in crypto.iterdir()}
        assert any(n.endswith(".db") for n in modes) and set(modes.values()) == {0o600}, modes

        # A restart keeps the device and its keys: a message sent while it was down is
        # answered, encrypted, and the person's client decrypts it.
        daemon.stop()
        # With no daemon running, doctor reads the fingerprint the daemon saved.
        assert f"e2ee device {bot.device_id}, ed25519 {e2ee['ed25519']}" in _cli(daemon, "doctor")
        me.send_text(room, "sent while you were away")
        daemon.start(timeout=30)
        wait_until(lambda: len(_wire(me, room, bot)) >= 2, 60, "the reply after the restart")
        time.sleep(1.5)
        replies = _wire(me, room, bot)
        assert len(replies) == 2, replies
        assert replies[1]["type"] == "m.room.encrypted"
        assert "sent while you were away" in (replies[1]["body"] or ""), replies[1]
        assert me.device_keys(bot.user_id) == {bot.device_id: fingerprint}
        device = json.loads((crypto / "device.json").read_text())
        assert device == {
            "user_id": bot.user_id,
            "device_id": bot.device_id,
            "ed25519": fingerprint,
        }

        # A stranger's encrypted message is ignored (logged), not decrypted, never answered.
        synapse.send_event(
            stranger,
            room,
            {
                "algorithm": "m.megolm.v1.aes-sha2",
                "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg2yyOwAtHaZTwyNg37afzg",
                "device_id": "STRANGERDEV",
                "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
                "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ",
            },
            kind="m.room.encrypted",
        )
        # A message whose key has not reached the bot: logged, held, and one notice (encrypted)
        # says so; when the key arrives (a to-device room key), it is answered, once.
        late, share_key = me.send_before_its_key(
            room, "the key comes later", bot.user_id, bot.device_id
        )
        wait_until(lambda: len(_wire(me, room, bot)) >= 3, 60, "the notice")
        time.sleep(1.0)
        replies = _wire(me, room, bot)
        assert len(replies) == 3 and replies[2]["type"] == "m.room.encrypted", replies
        assert replies[2]["msgtype"] == "m.notice"
        assert "could not decrypt your message" in replies[2]["body"] and late in replies[2]["body"]
        logged = [e for e in daemon.log_events() if "could not be decrypted" in str(e.get("event"))]
        assert [e.get("event_id") for e in logged] == [late]
        held = json.loads(_cli(daemon, "status", "--json"))["matrix"]["e2ee"]
        assert held["undecryptable"] == 1 and held["waiting_for_keys"] == 1
        share_key()
        wait_until(lambda: len(_wire(me, room, bot)) >= 4, 60, "the answer once the key came")
        time.sleep(1.5)
        replies = _wire(me, room, bot)
        assert len(replies) == 4 and replies[3]["type"] == "m.room.encrypted", replies
        assert "the key comes later" in (replies[3]["body"] or ""), replies[3]
        ignored = [e for e in daemon.log_events() if "not allowed" in str(e.get("event", ""))]
        assert [e.get("sender") for e in ignored] == [stranger.user_id]
        assert (
            json.loads(_cli(daemon, "status", "--json"))["matrix"]["e2ee"]["waiting_for_keys"] == 0
        )
    finally:
        daemon.stop()
        me.close()


# The Synapse is shared; this test's daemon start and waits cost ~15-20 s: `-m slow`.
@pytest.mark.slow
def test_a_token_whose_device_has_another_clients_keys_is_shown_in_status_and_doctor(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    from tests.matrix_person import EncryptingPerson  # the dev extra's matrix-nio

    bot, person, _stranger, room, daemon = _setup(synapse, tmp_path, encrypted=True)
    # Another client (as when a token is copied from Element) already put its keys on the
    # token's device: the daemon's own keys for it are refused.
    other = EncryptingPerson(synapse, bot, tmp_path / "another-client")
    other.close()
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)

        def problem() -> str:
            e2ee = json.loads(_cli(daemon, "status", "--json"))["matrix"]["e2ee"]
            return str(e2ee.get("problem") or "")

        wait_until(lambda: "keys upload refused" in problem(), 30, "the refused keys upload")
        assert "keys upload refused" in _cli(daemon, "status")
        doctor = _cli(daemon, "doctor")
        assert "[warn] matrix: connected in the daemon" in doctor and "own login" in doctor
        refused = [e for e in daemon.log_events() if "keys refused" in str(e.get("event"))]
        assert len(refused) == 1, refused
    finally:
        daemon.stop()


# The Synapse is shared; this test's daemon restart and waits cost ~20-30 s: `-m slow`.
@pytest.mark.slow
def test_without_encryption_support_an_encrypted_room_is_refused_with_one_notice(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    # The daemon runs where matrix-nio cannot be imported (as without the `matrix` extra).
    hide = tmp_path / "no-nio"
    (hide / "nio").mkdir(parents=True)
    (hide / "nio" / "__init__.py").write_text("raise ImportError('nio hidden by the test')\n")
    bot, person, _stranger, room, daemon = _setup(
        synapse, tmp_path, encrypted=True, env={"PYTHONPATH": str(hide)}
    )
    state = daemon.home / "channels" / "matrix"

    def handled(event_id: str) -> bool:
        seen = state / "seen.jsonl"
        return seen.exists() and event_id in seen.read_text()

    ciphertext = {
        "algorithm": "m.megolm.v1.aes-sha2",
        "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg2yyOwAtHaZTwyNg37afzg",
        "device_id": "PERSONDEV",
        "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
        "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ",
    }
    daemon.start(timeout=30)
    try:
        _ready(synapse, bot, person, room, daemon)
        wait_until(lambda: _bodies(synapse, person, room, bot), 30, "the refusal")
        secret = synapse.send_event(person, room, ciphertext, kind="m.room.encrypted")
        plain = synapse.send_text(person, room, "can you read this?")
        wait_until(lambda: handled(secret) and handled(plain), 30, "both events handled")
        time.sleep(1.5)
        (refusal,) = _from(synapse, person, room, bot.user_id)
        assert refusal["content"]["msgtype"] == "m.notice"
        body = refusal["content"]["body"]
        assert "cannot read encrypted messages" in body and "[channels.matrix] rooms" in body
        assert "pip install 'matrix-nio[e2e]'" in body and "nio hidden by the test" in body
        status = json.loads(_cli(daemon, "status", "--json"))["matrix"]
        assert status["encrypted_rooms"] == [room] and status["taken"] == 0
        assert status["e2ee"]["on"] is False
        assert f"refused {room}: end-to-end encrypted" in _cli(daemon, "status")
        logged = [e for e in daemon.log_events() if "encrypted; refused" in str(e.get("event"))]
        assert [e.get("room") for e in logged] == [room]
        transcripts = "".join(p.read_text() for p in daemon.home.glob("sessions/trunk/*.jsonl"))
        assert "can you read this?" not in transcripts

        # Said once: not again after a restart, nor for the next encrypted message.
        daemon.stop()
        again = synapse.send_event(person, room, ciphertext, kind="m.room.encrypted")
        daemon.start(timeout=30)
        wait_until(lambda: handled(again), 30, "the next encrypted event")
        time.sleep(1.5)
        assert len(_from(synapse, person, room, bot.user_id)) == 1
    finally:
        daemon.stop()


def _skipped(entry: dict[str, Any]) -> bool:
    return "event skipped" in str(entry.get("event"))


# The Synapse is shared; this test's daemon restart and waits cost ~20-30 s: `-m slow`.
@pytest.mark.slow
def test_bad_input_malformed_huge_media_edits_and_redactions(
    synapse: Synapse,  # noqa: F811
    tmp_path: Path,
) -> None:
    paragraph = "A long answer paragraph. " * 20  # ~500 characters
    long_reply = "\n\n".join(f"{i:03d} {paragraph.strip()}" for i in range(60))  # ~30,000
    with FakeAnthropic() as fake:
        fake.enqueue(long_reply, "nice cat", "answered after the restart")
        bot, person, _stranger, room, daemon = _setup(
            synapse,
            tmp_path,
            toml=FAKE_API_CONFIG,
            env={"ANTHROPIC_API_KEY": "test-key", "REVERIE_ANTHROPIC_BASE_URL": fake.url},
        )
        sent_to_model = lambda: json.dumps([r.body for r in fake.message_requests])  # noqa: E731
        daemon.start(timeout=30)
        try:
            _ready(synapse, bot, person, room, daemon)
            # Malformed messages are skipped (logged), never a turn.
            synapse.send_event(person, room, {"msgtype": "m.text", "body": "   "})
            # (Synapse refuses a message without a string body or msgtype; the unit test in
            # test_matrix_config covers those shapes.)
            synapse.send_event(person, room, {"msgtype": "m.location", "body": "x", "geo_uri": "0"})
            synapse.send_event(person, room, {"what": "not a message"}, kind="org.example.odd")
            # A huge message is cut before the inbox; a huge reply is split cleanly.
            huge = synapse.send_text(person, room, "word " * 9000)  # 45,000 characters
            wait_until(lambda: len(_bodies(synapse, person, room, bot)) >= 3, 60, "the reply")
            pieces = _bodies(synapse, person, room, bot)
            assert len(pieces) == 3 and all(len(p) <= 12_000 for p in pieces)
            assert "\n\n".join(pieces) == long_reply
            assert all(p.startswith(tuple(f"{i:03d} " for i in range(60))) for p in pieces)
            assert "more characters cut by the Matrix channel" in sent_to_model()
            assert len([e for e in daemon.log_events() if _skipped(e)]) == 2  # blank, location
            assert len(fake.message_requests) == 1

            # An edit of the answered message is not answered again.
            synapse.send_event(
                person,
                room,
                {
                    "msgtype": "m.text",
                    "body": "* shorter now",
                    "m.new_content": {"msgtype": "m.text", "body": "shorter now"},
                    "m.relates_to": {"rel_type": "m.replace", "event_id": huge},
                },
            )
            # Media is described, not downloaded.
            image = synapse.send_event(
                person,
                room,
                {
                    "msgtype": "m.image",
                    "body": "cat.jpg",
                    "url": "mxc://reverie.test/notfetched",
                    "info": {"mimetype": "image/jpeg", "size": 2048},
                },
            )
            wait_until(lambda: len(_bodies(synapse, person, room, bot)) >= 4, 60, "media reply")
            assert _bodies(synapse, person, room, bot)[3] == "nice cat"
            assert "sent an image over Matrix: 'cat.jpg' (image/jpeg, 2048 bytes)" in (
                sent_to_model()
            )
            assert "shorter now" not in sent_to_model() and len(fake.message_requests) == 2
            # Redacting a message that was answered: logged; the transcript keeps it.
            synapse.redact(person, room, image)
            wait_until(
                lambda: any("redacted after" in str(e.get("event")) for e in daemon.log_events()),
                30,
                "the redaction logged",
            )

            # A message redacted before the daemon read it is never answered.
            daemon.stop()
            gone = synapse.send_text(person, room, "please forget this")
            synapse.redact(person, room, gone)
            synapse.send_text(person, room, "after the redaction")
            daemon.start(timeout=30)
            wait_until(lambda: len(_bodies(synapse, person, room, bot)) >= 5, 60, "the reply")
            time.sleep(1.5)
            assert _bodies(synapse, person, room, bot)[4:] == ["answered after the restart"]
            assert "please forget this" not in sent_to_model()
            assert "after the redaction" in sent_to_model()
            assert len(fake.message_requests) == 3
            # (The log is this run's.) The redacted message's emptied event was skipped.
            assert [e.get("event_id") for e in daemon.log_events() if _skipped(e)] == [gone]
        finally:
            daemon.stop()
