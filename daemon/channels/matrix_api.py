"""The Matrix channel's access token (where it is read from) and the few client-server API
calls it makes, over httpx (encryption and the key requests are matrix-nio's: `matrix_crypto`).

A 429 is waited out here for as long as the homeserver asks (bounded); a server error or an
unreachable homeserver is `MatrixAway` (the caller backs off); any other 4xx is
`MatrixRefused` with the homeserver's `errcode`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.settings import MatrixSettings

log = get_logger("matrix")

SYNC_TIMEOUT_MS = 30_000
# Events per room in one sync; more since the last one is a gap, filled from the history.
TIMELINE_LIMIT = 20
BACKOFF_MAX_S = 60.0
TYPING_MS = 30_000


TOKEN_ENV = "REVERIE_MATRIX_TOKEN"
TOKEN_CREDENTIAL = "reverie-matrix-token"


class MatrixConfigError(ReverieError):
    """The channel cannot start as configured (one line a person can act on)."""


def matrix_token(settings: MatrixSettings, environ: Mapping[str, str] | None = None) -> str:
    """The bot's access token: environment, then systemd credential, then `token_file`."""
    env = os.environ if environ is None else environ
    value = env.get(TOKEN_ENV, "").strip()
    if value:
        return value
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if cred_dir:
        path = Path(cred_dir) / TOKEN_CREDENTIAL
        if path.is_file():
            value = path.read_text().strip()
            if value:
                return value
    if settings.token_file:
        path = Path(settings.token_file).expanduser()
        try:
            mode = path.stat().st_mode & 0o777
            value = path.read_text().strip()
        except OSError as exc:
            raise MatrixConfigError(
                f"channels.matrix.token_file {path} cannot be read: {exc.strerror or exc}"
            ) from None
        if mode & 0o077:
            raise MatrixConfigError(
                f"channels.matrix.token_file {path} is readable by others (mode {mode:o}); "
                f"chmod 600 {path}"
            )
        if value:
            return value
        raise MatrixConfigError(f"channels.matrix.token_file {path} is empty")
    raise MatrixConfigError(
        f"no Matrix access token: set {TOKEN_ENV}, the systemd credential {TOKEN_CREDENTIAL}, "
        "or channels.matrix.token_file"
    )


class MatrixAway(ReverieError):
    """The homeserver cannot be reached, or answered with a server error."""


class MatrixRefused(ReverieError):
    """The homeserver refused a request (4xx other than rate limiting)."""

    def __init__(self, status: int, errcode: str, error: str) -> None:
        super().__init__(f"{status} {errcode}: {error}")
        self.status = status
        self.errcode = errcode


class MatrixApi:
    """The few client-server API calls the channel makes; rate limits are waited out here."""

    def __init__(self, homeserver: str, token: str, *, client: httpx.AsyncClient | None = None):
        self.base = homeserver.rstrip("/")
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(SYNC_TIMEOUT_MS / 1000 + 15, connect=10)
        )
        self.token = token
        self._headers = {"Authorization": f"Bearer {token}"}

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        for _ in range(8):
            try:
                resp = await self._client.request(
                    method, self.base + path, json=body, params=params, headers=self._headers
                )
            except httpx.HTTPError as exc:
                raise MatrixAway(f"{type(exc).__name__}: {exc}") from None
            try:
                data = resp.json()
            except ValueError:
                data = {}
            if not isinstance(data, dict):
                data = {}
            if resp.status_code == 429:
                wait_ms = data.get("retry_after_ms")
                wait = float(wait_ms) / 1000 if isinstance(wait_ms, int | float) else 2.0
                log.info("rate limited by the homeserver; waiting", wait_s=round(wait, 2))
                await anyio.sleep(min(max(wait, 0.1), BACKOFF_MAX_S))
                continue
            if resp.status_code >= 500:
                raise MatrixAway(f"homeserver answered {resp.status_code}")
            if resp.status_code >= 400:
                raise MatrixRefused(
                    resp.status_code, str(data.get("errcode", "")), str(data.get("error", ""))
                )
            return data
        raise MatrixAway("still rate limited after 8 waits")

    async def whoami(self) -> str:
        return (await self.account())[0]

    async def account(self) -> tuple[str, str | None]:
        """The token's user and device (None where the homeserver names no device)."""
        me = await self.call("GET", "/_matrix/client/v3/account/whoami")
        device = me.get("device_id")
        return str(me.get("user_id")), device if isinstance(device, str) and device else None

    async def joined_rooms(self) -> list[str]:
        rooms = (await self.call("GET", "/_matrix/client/v3/joined_rooms")).get("joined_rooms")
        return [r for r in rooms if isinstance(r, str)] if isinstance(rooms, list) else []

    async def sync(self, since: str | None, timeout_ms: int) -> dict[str, Any]:
        params = {"timeout": str(timeout_ms), "filter": json.dumps(_SYNC_FILTER)}
        if since:
            params["since"] = since
        return await self.call("GET", "/_matrix/client/v3/sync", params=params)

    async def messages(self, room_id: str, start: str, stop: str) -> dict[str, Any]:
        """One page of a room's history, newest first, from `start` back to `stop`."""
        params = {"from": start, "to": stop, "dir": "b", "limit": "100"}
        path = f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/messages"
        return await self.call("GET", path, params=params)

    async def join(self, room_id: str) -> None:
        await self.call("POST", f"/_matrix/client/v3/join/{quote(room_id, safe='')}", body={})

    async def send(self, room_id: str, txn_id: str, content: dict[str, Any]) -> str:
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/send/m.room.message/"
            f"{quote(txn_id, safe='')}"
        )
        return str((await self.call("PUT", path, body=content)).get("event_id", ""))

    async def typing(self, room_id: str, user_id: str, on: bool) -> None:
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/typing/{quote(user_id, safe='')}"
        )
        body: dict[str, Any] = {"typing": on}
        if on:
            body["timeout"] = TYPING_MS
        await self.call("PUT", path, body=body)


_SYNC_FILTER: dict[str, Any] = {
    "presence": {"not_types": ["*"]},
    "account_data": {"not_types": ["*"]},
    "room": {
        "timeline": {"limit": TIMELINE_LIMIT},
        "state": {"lazy_load_members": True},
        "ephemeral": {"not_types": ["*"]},
        "account_data": {"not_types": ["*"]},
    },
}
