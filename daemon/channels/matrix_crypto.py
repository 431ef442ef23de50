"""End-to-end encryption for the Matrix channel: matrix-nio's Olm/Megolm machine (vodozemac).

The channel keeps its own sync loop (httpx, durable position, event-id dedupe); each sync batch
is also handed to nio's client (`receive_response`), which takes the to-device events (Olm
messages, room keys), the device-list changes and the one-time-key counts. After each batch the
upkeep runs through nio: one-time keys uploaded when the server holds too few, changed users'
device keys queried, wedged sessions re-claimed, queued to-device messages sent. A Megolm event
is decrypted here from the raw event the channel holds; a message for an encrypted room is
encrypted by nio (the room's group session shared with every device of its joined members,
unverified ones included: trust on first use — docs/channels.md, Encryption).

Everything lives in `<home>/channels/matrix/crypto/` (0700, files 0600): nio's SQLite store
(the account's identity and one-time keys, Olm and Megolm sessions, known devices), its trust
files, and `device.json` (the device id and its ed25519 fingerprint). The device is the access
token's (from `whoami`): the same token is the same device, keys and all, across restarts.

Without matrix-nio's e2e extra installed (`E2EE_MISSING` is the reason), the channel refuses an
encrypted room with one notice saying how to install it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from daemon.channels.matrix_api import SYNC_TIMEOUT_MS, MatrixAway, MatrixRefused
from daemon.channels.matrix_store import DEVICE_FILE, spaced
from daemon.log import get_logger

log = get_logger("matrix")

E2EE_MISSING: str | None
try:
    from aiohttp import ClientConnectionError
    from nio import (
        AsyncClient,
        AsyncClientConfig,
        EncryptionError,
        MegolmEvent,
        RoomSendError,
        SyncResponse,
    )
    from nio.crypto import ENCRYPTION_ENABLED
    from nio.rooms import MatrixRoom

    E2EE_MISSING = None if ENCRYPTION_ENABLED else "matrix-nio is installed without its e2e extra"
except ImportError as exc:  # the `matrix` extra is not installed
    E2EE_MISSING = f"matrix-nio[e2e] is not installed ({exc})"

# nio logs every failed decryption and key request itself, in plain text; the channel logs
# what the person needs (`matrix message could not be decrypted`), so only nio's errors pass.
logging.getLogger("nio").setLevel(logging.ERROR)


class MatrixCrypto:
    """The bot device's keys and sessions, and the nio client that uses them."""

    def __init__(
        self, root: Path, homeserver: str, user_id: str, device_id: str, token: str
    ) -> None:
        self.root = root
        self.user_id = user_id
        self.device_id = device_id
        self._homeserver = homeserver
        self._token = token
        self._client: Any = None
        # The last refused key upload: the device's keys on the homeserver are not these.
        self.problem: str | None = None

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> None:
        """Load (or create) the device's account and sessions from the store (blocking I/O)."""
        assert E2EE_MISSING is None
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self._note_device()
        stem = f"{self.user_id}_{self.device_id}"
        # Created 0600 before nio opens them: SQLite's journal takes the database file's mode,
        # and the trust files keep the mode they have.
        for suffix in (".db", ".trusted_devices", ".blacklisted_devices", ".ignored_devices"):
            path = self.root / f"{stem}{suffix}"
            path.touch(mode=0o600, exist_ok=True)
        config = AsyncClientConfig(
            encryption_enabled=True,
            store_sync_tokens=False,
            max_limit_exceeded=8,
            max_timeouts=2,
            request_timeout=SYNC_TIMEOUT_MS / 1000 + 15,
        )
        client = AsyncClient(self._homeserver, self.user_id, self.device_id, str(self.root), config)
        client.restore_login(self.user_id, self.device_id, self._token)
        if client.olm is None:
            raise RuntimeError("matrix-nio did not load its Olm machine")
        self._client = client
        self.tighten()
        self._save_device()
        log.info(
            "matrix end-to-end encryption ready", device_id=self.device_id, ed25519=self.ed25519
        )

    def _note_device(self) -> None:
        path = self.root / DEVICE_FILE
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        old = before.get("device_id") if isinstance(before, dict) else None
        if old and old != self.device_id:
            # Another login's token: another device, with keys of its own (the old store stays).
            log.warning(
                "matrix access token is for another device; new device keys, verify it again",
                old_device=old,
                device_id=self.device_id,
            )

    def _save_device(self) -> None:
        path = self.root / DEVICE_FILE
        record = {"user_id": self.user_id, "device_id": self.device_id, "ed25519": self.ed25519}
        try:
            if json.loads(path.read_text()) == record:
                return
        except (OSError, ValueError):
            pass
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    def tighten(self) -> None:
        """Every file of the store 0600 (nio may add one; the directory is 0700 anyway)."""
        for path in self.root.iterdir():
            if path.is_file() and path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)

    @property
    def ed25519(self) -> str:
        """The device's fingerprint key, as Element shows it in a session's details."""
        return str(self._client.olm.account.identity_keys["ed25519"]) if self._client else ""

    @property
    def curve25519(self) -> str:
        return str(self._client.olm.account.identity_keys["curve25519"]) if self._client else ""

    def describe(self) -> dict[str, Any]:
        described = {"device_id": self.device_id, "ed25519": spaced(self.ed25519)}
        if self.problem:
            described["problem"] = self.problem
        return described

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    # -- the sync's side -------------------------------------------------------------------

    async def receive(self, batch: Mapping[str, Any]) -> None:
        """Feed one sync batch (to-device events, device lists, key counts), then the upkeep."""
        response = SyncResponse.from_dict(dict(batch))
        if isinstance(response, SyncResponse):
            await self._client.receive_response(response)
        else:
            log.warning("matrix sync batch not understood by the crypto", error=str(response))
        await self.upkeep()

    async def upkeep(self) -> None:
        """Upload one-time keys, query changed devices, claim keys, send queued to-device."""
        client = self._client
        try:
            if client.should_upload_keys:
                refused = _check(await client.keys_upload(), "keys upload")
                if refused is not None and self.problem is None:
                    # Most often another client's keys on this device: the token is not the
                    # bot's own login. Nobody can encrypt to this device until that is fixed.
                    log.error(
                        "matrix device keys refused by the homeserver; log the bot in anew",
                        device_id=self.device_id,
                        error=refused,
                    )
                self.problem = refused
            if client.should_query_keys:
                _check(await client.keys_query(), "keys query")
            if client.should_claim_keys:
                _check(await client.keys_claim(client.get_users_for_key_claiming()), "keys claim")
            if client.outgoing_to_device_messages:
                for resp in await client.send_to_device_messages():
                    _check(resp, "to-device message")
        except (ClientConnectionError, TimeoutError) as exc:
            raise MatrixAway(f"{type(exc).__name__}: {exc}") from None
        finally:
            self.tighten()

    def decrypt(self, room_id: str, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """The clear event of a Megolm event; None when it cannot be decrypted (logged)."""
        parsed = MegolmEvent.from_dict({**event, "room_id": room_id})
        if not isinstance(parsed, MegolmEvent):
            log.warning("matrix encrypted event malformed", event_id=event.get("event_id"))
            return None
        try:
            clear = self._client.olm.decrypt_megolm_event(parsed, room_id)
        except EncryptionError as exc:
            log.warning(
                "matrix message could not be decrypted",
                room=room_id,
                event_id=event.get("event_id"),
                sender=event.get("sender"),
                session_id=parsed.session_id,
                error=str(exc),
            )
            return None
        source = getattr(clear, "source", None)
        if not isinstance(source, Mapping) or not isinstance(source.get("content"), Mapping):
            return None
        return {
            "event_id": event.get("event_id"),
            "sender": event.get("sender"),
            "origin_server_ts": event.get("origin_server_ts"),
            "type": source.get("type"),
            "content": dict(source["content"]),
            "unsigned": event.get("unsigned", {}),
            "decrypted": True,
        }

    # -- the sender's side -----------------------------------------------------------------

    async def send(self, room_id: str, txn_id: str, content: dict[str, Any]) -> str:
        """Encrypt a message for the room (sharing its group session first) and send it."""
        client = self._client
        if room_id not in client.rooms:
            # After a restart nio knows no room until a sync shows it: its members are read
            # (`joined_members`) before the first message, so every device gets the key.
            client.rooms[room_id] = MatrixRoom(room_id, self.user_id, encrypted=True)
        client.rooms[room_id].encrypted = True
        try:
            resp = await client.room_send(
                room_id, "m.room.message", content, tx_id=txn_id, ignore_unverified_devices=True
            )
        except (ClientConnectionError, TimeoutError) as exc:
            raise MatrixAway(f"{type(exc).__name__}: {exc}") from None
        finally:
            self.tighten()
        if isinstance(resp, RoomSendError):
            status = getattr(getattr(resp, "transport_response", None), "status", 0) or 0
            if status >= 500 or not status:
                raise MatrixAway(f"encrypted send failed: {resp}")
            raise MatrixRefused(status, str(resp.status_code or ""), str(resp.message))
        return str(getattr(resp, "event_id", ""))


def _check(resp: Any, what: str) -> str | None:
    """A failed key request's reason (logged; the next upkeep tries again), else None; a
    server error is `MatrixAway`."""
    message = getattr(resp, "message", None)
    if message is None:
        return None
    status = getattr(getattr(resp, "transport_response", None), "status", 0) or 0
    if status >= 500:
        raise MatrixAway(f"{what} failed: {resp}")
    log.warning(f"matrix {what} failed", error=str(resp), status=status)
    return f"{what} refused: {resp}"
