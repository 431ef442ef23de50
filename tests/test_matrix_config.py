"""The Matrix channel's configuration and its pure parts: the token's sources, refusals, how
replies are split and how events read as the person's message."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from daemon.channels.matrix import MatrixConfigError, matrix_token
from daemon.channels.matrix_api import MatrixApi, MatrixAway, MatrixRefused
from daemon.channels.matrix_store import client_msg_id, parse_client_msg_id
from daemon.channels.matrix_text import MAX_INCOMING_CHARS, message_text, split_reply
from daemon.settings import ConfigError, MatrixSettings, load_settings

ENABLED = """
[channels.matrix]
enabled = true
homeserver = "https://matrix.example.org"
user_id = "@reverie:example.org"
rooms = ["!abc:example.org", "!NoServerPartInRoomV12"]
allow = ["@me:example.org"]
"""


def _home(tmp_path: Path, toml: str) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(toml)
    return home


def test_off_by_default_and_a_full_section_loads(tmp_path: Path) -> None:
    assert load_settings(None, environ={}).channels.matrix.enabled is False
    s = load_settings(_home(tmp_path, ENABLED), environ={}).channels.matrix
    assert s.enabled and s.rooms[1] == "!NoServerPartInRoomV12" and s.allow == ["@me:example.org"]


@pytest.mark.parametrize("key", ["access_token", "token", "password"])
def test_a_secret_in_the_toml_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(
        ConfigError, match=f"channels.matrix.{key} is refused.*REVERIE_MATRIX_TOKEN"
    ):
        load_settings(_home(tmp_path, ENABLED + f'{key} = "syt_secret"\n'), environ={})


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('homeserver = "matrix.example.org"', "not an http"),
        ('user_id = "reverie"', "not a Matrix ID"),
        ('rooms = ["#alias:example.org"]', "not a room ID"),
        ('allow = ["me@example.org"]', "not a Matrix ID"),
        ("allow = []", "at least one room and one allowed"),
    ],
)
def test_an_enabled_section_is_checked(tmp_path: Path, line: str, why: str) -> None:
    key = line.split(" = ")[0]
    toml = "\n".join(x for x in ENABLED.splitlines() if not x.startswith(key + " ")) + "\n" + line
    with pytest.raises(ConfigError, match=why):
        load_settings(_home(tmp_path, toml), environ={})


def test_the_token_comes_from_env_then_credential_then_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    os.chmod(token_file, 0o600)
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "reverie-matrix-token").write_text("from-credential\n")
    s = MatrixSettings(token_file=str(token_file))
    both = {"REVERIE_MATRIX_TOKEN": "from-env", "CREDENTIALS_DIRECTORY": str(creds)}
    assert matrix_token(s, both) == "from-env"
    assert matrix_token(s, {"CREDENTIALS_DIRECTORY": str(creds)}) == "from-credential"
    assert matrix_token(s, {}) == "from-file"
    with pytest.raises(MatrixConfigError, match="no Matrix access token"):
        matrix_token(MatrixSettings(), {})


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t")
    os.chmod(token_file, 0o644)
    with pytest.raises(MatrixConfigError, match=r"readable by others.*chmod 600"):
        matrix_token(MatrixSettings(token_file=str(token_file)), {})


def test_long_replies_are_split_at_paragraphs_under_the_limit() -> None:
    paragraphs = [f"paragraph {i} " + "word " * 30 for i in range(40)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    pieces = split_reply(text, limit=1000)
    assert len(pieces) > 1
    assert all(len(p) <= 1000 for p in pieces)
    # Nothing lost, nothing cut mid-paragraph.
    assert "\n\n".join(pieces) == text
    assert all(p.startswith("paragraph ") for p in pieces)
    # One unbroken run of text is still cut under the limit.
    assert [len(p) for p in split_reply("x" * 2500, limit=1000)] == [1000, 1000, 500]
    assert split_reply("  \n ") == []


def test_events_read_as_the_persons_message() -> None:
    def ev(content: object) -> dict[str, object]:
        return {"type": "m.room.message", "content": content}

    assert message_text(ev({"msgtype": "m.text", "body": " hi "})) == "hi"
    assert message_text(ev({"msgtype": "m.emote", "body": "waves"})) == "* waves"
    edit = {"msgtype": "m.text", "body": "* fixed", "m.relates_to": {"rel_type": "m.replace"}}
    assert message_text(ev(edit)) is None
    image = message_text(ev({"msgtype": "m.image", "body": "cat.png", "info": {"size": 1234}}))
    assert image is not None and "image" in image and "cat.png" in image and "1234" in image
    for bad in (None, "text", {"msgtype": "m.text"}, {"msgtype": "m.text", "body": 5}, {}):
        assert message_text(ev(bad)) is None
    huge = message_text(ev({"msgtype": "m.text", "body": "a" * (MAX_INCOMING_CHARS + 500)}))
    assert huge is not None and huge.startswith("a" * MAX_INCOMING_CHARS) and "500 more" in huge


def test_an_inbox_entry_names_its_room_and_event() -> None:
    cid = client_msg_id("!room:example.org", "$event")
    assert parse_client_msg_id(cid) == ("!room:example.org", "$event")
    assert parse_client_msg_id("abc") is None and parse_client_msg_id(None) is None


class _Homeserver(BaseHTTPRequestHandler):
    """A homeserver that rate-limits the first request, then answers; or fails with 502."""

    calls: ClassVar[list[float]] = []
    mode: ClassVar[str] = "limit"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        type(self).calls.append(time.monotonic())
        if self.mode == "limit" and len(self.calls) == 1:
            status, body = 429, {"errcode": "M_LIMIT_EXCEEDED", "retry_after_ms": 300}
        elif self.mode == "down":
            status, body = 502, {}
        elif self.mode == "refuse":
            status, body = 401, {"errcode": "M_UNKNOWN_TOKEN", "error": "bad token"}
        else:
            status, body = 200, {"user_id": "@bot:example.org"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.parametrize("mode", ["limit", "down", "refuse"])
def test_rate_limits_are_waited_out_and_failures_named(mode: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Homeserver)
    _Homeserver.calls, _Homeserver.mode = [], mode
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    async def whoami() -> str:
        api = MatrixApi(f"http://127.0.0.1:{server.server_address[1]}", "token")
        try:
            return await api.whoami()
        finally:
            await api.aclose()

    try:
        if mode == "limit":
            assert anyio.run(whoami) == "@bot:example.org"
            # The second call came after the wait the homeserver asked for, not before.
            assert len(_Homeserver.calls) == 2
            assert _Homeserver.calls[1] - _Homeserver.calls[0] >= 0.3
        elif mode == "down":
            with pytest.raises(MatrixAway, match="502"):
                anyio.run(whoami)
        else:
            with pytest.raises(MatrixRefused) as refused:
                anyio.run(whoami)
            assert refused.value.errcode == "M_UNKNOWN_TOKEN"
    finally:
        server.shutdown()
        server.server_close()
