"""A real Synapse homeserver for the Matrix channel's tests: on loopback, SQLite, in a temp dir.

Synapse comes from the `matrix-synapse` package (the dev extra installs it). The server has no
federation, no TLS, rate limits raised out of the way, and registration only by shared secret
(the admin API's HMAC-signed `/_synapse/admin/v1/register`). `Synapse.stop()` kills it and
`Synapse.start()` brings it back on the same port and database, so a test can take the
homeserver away mid-conversation. Where Synapse cannot start, tests skip with one line (or fail
under `REVERIE_TESTS_REQUIRE_ALL`, as in CI).

Use in a test module: `from tests.matrix_server import synapse  # noqa: F401`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness import unavailable

SERVER_NAME = "reverie.test"
START_TIMEOUT_S = 60.0

_CONFIG = """\
server_name: "{server_name}"
pid_file: "{dir}/homeserver.pid"
public_baseurl: "http://127.0.0.1:{port}/"
listeners:
  - port: {port}
    bind_addresses: ["127.0.0.1"]
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{dir}/homeserver.db"
log_config: "{dir}/log.yaml"
media_store_path: "{dir}/media"
signing_key_path: "{dir}/signing.key"
registration_shared_secret: "{secret}"
enable_registration: false
report_stats: false
trusted_key_servers: []
federation_domain_whitelist: []
suppress_key_server_warning: true
presence:
  enabled: false
url_preview_enabled: false
enable_metrics: false
# A repeated identical /sync would be answered from a 2-minute cache (stale typing state).
caches:
  sync_response_cache_duration: 0
macaroon_secret_key: "{macaroon}"
form_secret: "{form}"
rc_message:
  per_second: 1000
  burst_count: 1000
rc_registration:
  per_second: 1000
  burst_count: 1000
rc_login:
  address: {{per_second: 1000, burst_count: 1000}}
  account: {{per_second: 1000, burst_count: 1000}}
  failed_attempts: {{per_second: 1000, burst_count: 1000}}
rc_joins:
  local: {{per_second: 1000, burst_count: 1000}}
  remote: {{per_second: 1000, burst_count: 1000}}
rc_invites:
  per_room: {{per_second: 1000, burst_count: 1000}}
  per_user: {{per_second: 1000, burst_count: 1000}}
  per_issuer: {{per_second: 1000, burst_count: 1000}}
"""

_LOG_CONFIG = """\
version: 1
formatters:
  precise:
    format: '%(asctime)s %(name)s %(levelname)s %(message)s'
handlers:
  file:
    class: logging.FileHandler
    filename: "{dir}/homeserver.log"
    formatter: precise
root:
  level: WARNING
  handlers: [file]
disable_existing_loggers: false
"""


def channel_toml(server: Synapse, bot: Account, room: str, allow: Account, extra: str = "") -> str:
    """The `[channels.matrix]` section a home needs to answer `allow` in `room` as `bot`."""
    return f"""
[channels.matrix]
enabled = true
homeserver = "{server.url}"
user_id = "{bot.user_id}"
rooms = ["{room}"]
allow = ["{allow.user_id}"]
{extra}"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Account:
    user_id: str
    access_token: str
    device_id: str


class Synapse:
    """One Synapse process over a directory of its own; stop and start it again at will."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.secret = uuid.uuid4().hex
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_s = 0.0
        root.mkdir(parents=True, exist_ok=True)
        (root / "media").mkdir(exist_ok=True)
        (root / "homeserver.yaml").write_text(
            _CONFIG.format(
                server_name=SERVER_NAME,
                dir=root,
                port=self.port,
                secret=self.secret,
                macaroon=uuid.uuid4().hex,
                form=uuid.uuid4().hex,
            )
        )
        (root / "log.yaml").write_text(_LOG_CONFIG.format(dir=root))

    def _command(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "synapse.app.homeserver",
            "--config-path",
            str(self.root / "homeserver.yaml"),
            *extra,
        ]

    def start(self) -> None:
        """Start the server (generating its signing key the first time); wait until it answers."""
        if not (self.root / "signing.key").exists():
            subprocess.run(
                self._command("--generate-keys"),
                check=True,
                capture_output=True,
                timeout=START_TIMEOUT_S,
            )
        began = time.monotonic()
        out = (self.root / "stdout.log").open("ab")
        self.proc = subprocess.Popen(
            self._command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        out.close()
        deadline = began + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"synapse exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_matrix/client/versions", timeout=2):
                    self.started_s = time.monotonic() - began
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"synapse did not answer within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """Kill the server now (SIGKILL: the homeserver goes away, as when its machine does)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stdout.log", "homeserver.log"):
            path = self.root / name
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- the client-server API, for the tests' own accounts ---------------------------------

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"{}")

    def register(self, localpart: str, *, admin: bool = False) -> Account:
        """Register a user by shared secret (HMAC-SHA1 over nonce, user, password, admin)."""
        nonce = self.request("GET", "/_synapse/admin/v1/register")["nonce"]
        password = uuid.uuid4().hex
        mac = hmac.new(self.secret.encode(), digestmod=hashlib.sha1)
        mac.update(b"\x00".join([nonce.encode(), localpart.encode(), password.encode()]))
        mac.update(b"\x00" + (b"admin" if admin else b"notadmin"))
        reply = self.request(
            "POST",
            "/_synapse/admin/v1/register",
            {
                "nonce": nonce,
                "username": localpart,
                "password": password,
                "admin": admin,
                "mac": mac.hexdigest(),
            },
        )
        return Account(reply["user_id"], reply["access_token"], reply["device_id"])

    def create_room(
        self,
        owner: Account,
        invite: list[str] = (),  # type: ignore[assignment]
        *,
        encrypted: bool = False,
    ) -> str:
        """A private room; `encrypted` sets `m.room.encryption` (Megolm) in its initial state."""
        body: dict[str, Any] = {
            "preset": "private_chat",
            "invite": list(invite),
            "is_direct": False,
        }
        if encrypted:
            body["initial_state"] = [
                {
                    "type": "m.room.encryption",
                    "state_key": "",
                    "content": {"algorithm": "m.megolm.v1.aes-sha2"},
                }
            ]
        reply = self.request(
            "POST", "/_matrix/client/v3/createRoom", body, token=owner.access_token
        )
        return str(reply["room_id"])

    def send_event(
        self, account: Account, room_id: str, content: dict[str, Any], kind: str = "m.room.message"
    ) -> str:
        """Send any event content as it is (the homeserver does not check a message's shape)."""
        reply = self.request(
            "PUT",
            f"/_matrix/client/v3/rooms/{room_id}/send/{kind}/{uuid.uuid4().hex}",
            content,
            token=account.access_token,
        )
        return str(reply["event_id"])

    def redact(self, account: Account, room_id: str, event_id: str) -> str:
        reply = self.request(
            "PUT",
            f"/_matrix/client/v3/rooms/{room_id}/redact/{event_id}/{uuid.uuid4().hex}",
            {"reason": "test"},
            token=account.access_token,
        )
        return str(reply["event_id"])

    def join(self, account: Account, room_id: str) -> None:
        self.request(
            "POST", f"/_matrix/client/v3/rooms/{room_id}/join", {}, token=account.access_token
        )

    def send_text(self, account: Account, room_id: str, text: str) -> str:
        txn = uuid.uuid4().hex
        reply = self.request(
            "PUT",
            f"/_matrix/client/v3/rooms/{room_id}/send/m.room.message/{txn}",
            {"msgtype": "m.text", "body": text},
            token=account.access_token,
        )
        return str(reply["event_id"])

    def messages(self, account: Account, room_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """The room's `m.room.message` events, oldest first."""
        reply = self.request(
            "GET",
            f"/_matrix/client/v3/rooms/{room_id}/messages?dir=b&limit={limit}",
            token=account.access_token,
        )
        events = [e for e in reply.get("chunk", []) if e.get("type") == "m.room.message"]
        return list(reversed(events))


@pytest.fixture(scope="session")
def synapse() -> Iterator[Synapse]:
    """One Synapse for the test session (skips, or fails under CI, when it cannot start)."""
    try:
        import synapse as _synapse  # noqa: F401
    except ImportError:
        unavailable("no Synapse for this run: matrix-synapse is not installed (the dev extra)")
    root = Path(tempfile.mkdtemp(prefix="rvsyn-"))
    server = Synapse(root)
    try:
        server.start()
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        unavailable(f"no Synapse for this run: {exc!r}"[:300])
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
