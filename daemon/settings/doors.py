"""Sections of the doors besides the socket: the web console and the Matrix channel."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from daemon.settings.core import Section


@dataclass(frozen=True, kw_only=True)
class ListenAddress:
    """Where a listener binds: a TCP host and port, or a Unix socket path."""

    host: str = ""
    port: int = 0
    path: str = ""

    @classmethod
    def parse(cls, text: str) -> ListenAddress:
        """Read "HOST:PORT", "[V6]:PORT" or an absolute path; raise `ValueError` saying why not."""
        text = text.strip()
        if text.startswith("/"):
            return cls(path=text)
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"{text!r} is neither HOST:PORT (e.g. 127.0.0.1:8765) nor an absolute Unix socket path"
            )
        return cls(host=host.removeprefix("[").removesuffix("]"), port=int(port))

    @property
    def loopback(self) -> bool:
        if self.path:
            return True  # a Unix socket is reachable only on this machine
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name that could resolve anywhere

    def __str__(self) -> str:
        if self.path:
            return self.path
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class WebSettings(Section):
    """The local web console (`daemon.web`): off unless asked for, on loopback unless allowed."""

    enabled: bool = False
    # "HOST:PORT" (a loopback address unless allow_remote), or an absolute Unix socket path.
    listen: str = "127.0.0.1:8765"
    allow_remote: bool = False
    # Host header names the console answers besides the listen address's own (a proxy's name).
    hosts: list[str] = Field(default_factory=list)

    @property
    def address(self) -> ListenAddress:
        return ListenAddress.parse(self.listen)

    @model_validator(mode="after")
    def _loopback_unless_allowed(self) -> WebSettings:
        address = ListenAddress.parse(self.listen)  # ValueError: a readable config error
        if not address.loopback and not self.allow_remote:
            raise ValueError(
                f"web.listen {self.listen!r} is not a loopback address: the console would be "
                "reachable from other machines; use 127.0.0.1, ::1 or a Unix socket path, or set "
                "web.allow_remote = true if you mean it"
            )
        return self


# Keys that would put a Matrix secret in the TOML: refused, the token lives elsewhere.
_MATRIX_SECRET_KEYS = ("access_token", "token", "password")


class MatrixSettings(Section):
    """The Matrix channel (`daemon.channels.matrix`): one bot account, off unless turned on.

    The bot's access token is never in the TOML: `REVERIE_MATRIX_TOKEN` in the environment,
    the systemd credential `reverie-matrix-token`, or the file `token_file` names.
    """

    enabled: bool = False
    # The homeserver's client-server API base URL, e.g. "https://matrix.example.org".
    homeserver: str = ""
    # The bot's own Matrix ID, e.g. "@reverie:example.org".
    user_id: str = ""
    # A file holding the bot's access token (mode 0600), when not in the environment/credential.
    token_file: str = ""
    # Room IDs ("!abc:example.org") the bot answers in; invites to other rooms are ignored.
    rooms: list[str] = Field(default_factory=list)
    # Matrix IDs allowed to talk to it as the person; everyone else is ignored and logged.
    allow: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_secret_here(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in _MATRIX_SECRET_KEYS:
                if key in data:
                    raise ValueError(
                        f"channels.matrix.{key} is refused: a secret does not belong in the "
                        "config file; put the access token in REVERIE_MATRIX_TOKEN, the systemd "
                        "credential reverie-matrix-token, or a 0600 file named by token_file"
                    )
        return data

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> MatrixSettings:
        if not self.enabled:
            return self
        if not re.match(r"^https?://[^/\s]+", self.homeserver):
            raise ValueError(
                f"channels.matrix.homeserver {self.homeserver!r} is not an http(s) URL"
            )
        if not re.match(r"^@[^:\s]+:\S+$", self.user_id):
            raise ValueError(f"channels.matrix.user_id {self.user_id!r} is not a Matrix ID")
        for room in self.rooms:
            # Room versions before 12 read "!id:server"; version 12 drops the server part.
            if not re.match(r"^![^\s:]+(:\S+)?$", room):
                raise ValueError(f"channels.matrix.rooms: {room!r} is not a room ID (!id:server)")
        for who in self.allow:
            if not re.match(r"^@[^:\s]+:\S+$", who):
                raise ValueError(f"channels.matrix.allow: {who!r} is not a Matrix ID")
        if not self.rooms or not self.allow:
            raise ValueError("channels.matrix needs at least one room and one allowed Matrix ID")
        return self


class ChannelsSettings(Section):
    """Doors to the same conversation besides the socket (docs/channels.md)."""

    matrix: MatrixSettings = MatrixSettings()
