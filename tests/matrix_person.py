"""The person as a real end-to-end encrypting Matrix client: matrix-nio's AsyncClient (vodozemac
Olm/Megolm) with its key store in a temp dir, against the tests' Synapse (tests/matrix_server.py).

Each call runs on one event loop of its own (the client's HTTP session lives on it); the test
stays synchronous. What the client sends to an encrypted room goes out as `m.room.encrypted`
with its group session shared to every device of the room's members (the bot's included, once
its keys are on the homeserver).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from nio import AsyncClient, AsyncClientConfig, MegolmEvent, RoomSendError, ToDeviceMessage

from tests.matrix_server import Account, Synapse

T = TypeVar("T")


class EncryptingPerson:
    """A second real client, with end-to-end encryption, acting as the person."""

    def __init__(self, server: Synapse, account: Account, store: Path) -> None:
        self.server = server
        self.account = account
        store.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.new_event_loop()
        config = AsyncClientConfig(encryption_enabled=True, store_sync_tokens=True)
        self.client = AsyncClient(
            server.url, account.user_id, account.device_id, str(store), config
        )
        self.client.restore_login(account.user_id, account.device_id, account.access_token)
        self._run(self._upkeep())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        self._run(self.client.close())
        self._loop.close()

    async def _upkeep(self) -> None:
        c = self.client
        if c.should_upload_keys:
            await c.keys_upload()
        if c.should_query_keys:
            await c.keys_query()
        if c.should_claim_keys:
            await c.keys_claim(c.get_users_for_key_claiming())
        await c.send_to_device_messages()

    async def _sync(self) -> None:
        await self.client.sync(timeout=0, full_state=self.client.next_batch is None)
        await self._upkeep()

    def sync(self) -> None:
        """One sync (room keys and device lists in), then the key upkeep."""
        self._run(self._sync())

    def device_keys(self, user_id: str) -> dict[str, str]:
        """device id -> ed25519 fingerprint of a user's devices, as the homeserver lists them."""

        async def query() -> dict[str, str]:
            self.client.olm.users_for_key_query.add(user_id)
            await self.client.keys_query()
            devices = self.client.device_store.active_user_devices(user_id)
            return {d.id: d.ed25519 for d in devices}

        return self._run(query())

    def send_text(self, room_id: str, text: str) -> str:
        """An encrypted text message to the room (the group session shared first)."""

        async def send() -> str:
            await self._sync()
            # Read the members (and their devices) anew: a device added since is included.
            self.client.rooms[room_id].members_synced = False
            resp = await self.client.room_send(
                room_id,
                "m.room.message",
                {"msgtype": "m.text", "body": text},
                ignore_unverified_devices=True,
            )
            if isinstance(resp, RoomSendError):
                raise AssertionError(f"encrypted send failed: {resp}")
            return str(resp.event_id)

        return self._run(send())

    def send_before_its_key(
        self, room_id: str, text: str, user_id: str, device_id: str
    ) -> tuple[str, Callable[[], None]]:
        """An encrypted message whose room key the given device does not get with it; the
        function returned sends that key (index 0, Olm-encrypted to the device) later on."""
        olm = self.client.olm

        async def send() -> tuple[str, dict[str, str]]:
            await self._sync()
            # An Olm session with the device, for the key later (its one-time key claimed).
            await self.client.keys_claim({user_id: [device_id]})
            olm.create_outbound_group_session(room_id)
            group = olm.outbound_group_sessions[room_id]
            key = {
                "algorithm": "m.megolm.v1.aes-sha2",
                "room_id": room_id,
                "session_id": group.id,
                "session_key": group.session_key,
            }
            group.shared = True  # shared with no one: the message goes out without its key
            content = olm.group_encrypt(
                room_id, {"type": "m.room.message", "content": {"msgtype": "m.text", "body": text}}
            )
            # The next message starts a session of its own, shared the usual way.
            del olm.outbound_group_sessions[room_id]
            return self.server.send_event(self.account, room_id, content, "m.room.encrypted"), key

        event_id, key = self._run(send())

        def share() -> None:
            async def go() -> None:
                device = self.client.device_store[user_id][device_id]
                session = olm.session_store.get(device.curve25519)
                payload = olm._olm_encrypt(session, device, "m.room_key", key)
                message = ToDeviceMessage("m.room.encrypted", user_id, device_id, payload)
                resp = await self.client.to_device(message)
                assert not hasattr(resp, "message"), resp

            self._run(go())

        return event_id, share

    def events_from(self, room_id: str, sender: str) -> list[dict[str, Any]]:
        """The sender's room events as on the wire (`type`), oldest first, each decrypted by
        this client where it can (`body`, `msgtype`; None when it cannot)."""

        async def read() -> list[dict[str, Any]]:
            await self._sync()
            reply = self.server.request(
                "GET",
                f"/_matrix/client/v3/rooms/{room_id}/messages?dir=b&limit=100",
                token=self.account.access_token,
            )
            out: list[dict[str, Any]] = []
            for raw in reversed(reply.get("chunk", [])):
                if raw.get("sender") != sender or raw.get("type") not in (
                    "m.room.message",
                    "m.room.encrypted",
                ):
                    continue
                seen: dict[str, Any] = {"type": raw["type"], "event_id": raw["event_id"]}
                content = raw.get("content", {})
                if raw["type"] == "m.room.encrypted":
                    event = MegolmEvent.from_dict({**raw, "room_id": room_id})
                    try:
                        clear = self.client.olm.decrypt_megolm_event(event, room_id)
                        content = clear.source.get("content", {})
                    except Exception as exc:
                        seen["error"] = str(exc)
                        content = {}
                seen["body"] = content.get("body")
                seen["msgtype"] = content.get("msgtype")
                out.append(seen)
            return out

        return self._run(read())
