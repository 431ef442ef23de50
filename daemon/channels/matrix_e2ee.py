"""The Matrix channel's end-to-end encrypted rooms, on the channel's side.

Which configured rooms are encrypted (recorded in `seen.jsonl` the first time an
`m.room.encryption` state or an `m.room.encrypted` event shows it); the bot device's keys once
the channel is connected (`matrix_crypto`); a person's message whose room key has not arrived,
held in `held.jsonl` with one notice saying so and taken once the key comes in a later sync;
and, where encryption support is not installed (or the token names no device), the refusal:
one notice per room saying how to proceed, and nothing taken from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from daemon.channels.matrix_crypto import E2EE_MISSING, MatrixCrypto
from daemon.channels.matrix_store import STORE_DIR, MatrixStore, Reply
from daemon.log import get_logger

log = get_logger("matrix")

ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and this Reverie install cannot read encrypted "
    "messages ({why}): nothing said here reaches it, and it will not answer here. To proceed, "
    "install the encryption support into the daemon's Python environment (Reverie's matrix "
    "extra, pip install '.[matrix]', or pip install 'matrix-nio[e2e]') and restart the "
    "daemon; or create a room with encryption off (in Element: New room, then turn off "
    "'Enable end-to-end encryption'), invite {bot}, and put the new room's ID in "
    "[channels.matrix] rooms. See docs/channels.md, Encryption."
)
UNDECRYPTABLE_NOTICE = (
    "I could not decrypt your message (event {event}): this device ({device}) has not received "
    "its key. It will be answered if the key arrives later; if it does not, please send it "
    "again (your client shares the key with this device for new messages)."
)
# Encrypted messages held for their room key at most; the oldest beyond it are dropped.
HELD_MAX = 200

# (event id or None, room id): record that the room is encrypted (and the event handled).
MarkEncrypted = Callable[[str | None, str], Awaitable[None]]
# (event id, room id): record an event as handled, taken by no turn.
MarkSeen = Callable[[str, str], Awaitable[None]]


class RoomEncryption:
    """Encrypted rooms for one channel: decrypt, hold, refuse, send encrypted."""

    def __init__(
        self,
        store: MatrixStore,
        user_id: str,
        queue: Callable[[Reply], None],
        mark_encrypted: MarkEncrypted,
        mark_seen: MarkSeen,
    ) -> None:
        self.store = store
        self.user_id = user_id
        self._queue = queue
        self._mark_encrypted = mark_encrypted
        self._mark_seen = mark_seen
        # Why encryption is off (None: on); the device's keys while connected.
        self.off: str | None = E2EE_MISSING
        self.crypto: MatrixCrypto | None = None
        self._ready = anyio.Event()
        self.rooms: set[str] = set()
        self.held: dict[str, tuple[str, dict[str, Any]]] = {}
        self.undecrypted = 0

    def load(
        self, rooms: set[str], held: dict[str, tuple[str, dict[str, Any]]], seen: set[str]
    ) -> None:
        """What the files say at the start; a held message already taken is held no more."""
        self.rooms = set(rooms)
        self.held = {e: v for e, v in held.items() if e not in seen}

    def refused(self) -> set[str]:
        """Encrypted rooms refused: all of them while encryption support is off."""
        return set(self.rooms) if self.off is not None else set()

    def describe(self) -> dict[str, Any]:
        e2ee: dict[str, Any] = {"on": self.off is None, "reason": self.off}
        if self.crypto is not None:
            e2ee.update(self.crypto.describe())
        e2ee["rooms"] = sorted(self.rooms) if self.off is None else []
        e2ee["undecryptable"] = self.undecrypted
        e2ee["waiting_for_keys"] = len(self.held)
        return e2ee

    # -- the device ------------------------------------------------------------------------

    async def open(self, root: Path, homeserver: str, device: str | None, token: str) -> None:
        """The bot device's keys (created on first use), and one-time keys uploaded."""
        if E2EE_MISSING is not None or self.crypto is not None:
            return
        if device is None:
            self.off = "the access token names no device, so it can hold no keys"
            log.error("matrix end-to-end encryption off", reason=self.off)
            return
        crypto = MatrixCrypto(root / STORE_DIR, homeserver, self.user_id, device, token)
        crypto.open()
        self.crypto = crypto
        await crypto.upkeep()
        self._ready.set()

    async def close(self) -> None:
        if self.crypto is not None:
            with anyio.CancelScope(shield=True):
                await self.crypto.close()
        self.crypto = None
        self._ready = anyio.Event()

    async def receive(self, batch: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """Feed a sync batch to the crypto; the held messages its room keys now decrypt (the
        caller takes each, then `release`s it)."""
        if self.crypto is None:
            return []
        await self.crypto.receive(batch)
        to_device = batch.get("to_device")
        if not self.held or not isinstance(to_device, Mapping) or not to_device.get("events"):
            return []
        due = []
        for event_id, (room_id, raw) in list(self.held.items()):
            if self.crypto.decrypt(room_id, raw) is None:
                continue
            log.info("matrix message decrypted after its key arrived", event_id=event_id)
            del self.held[event_id]
            due.append((room_id, raw))
        return due

    def hold_again(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Held messages that `receive` handed out but were not taken (the inbox refused)."""
        for room_id, raw in events:
            self.held[str(raw.get("event_id"))] = (room_id, raw)

    async def release(self, event_id: str) -> None:
        """A held message was taken: `held.jsonl` no longer keeps it."""
        await anyio.to_thread.run_sync(self.store.unhold, event_id)

    # -- the sync's side -------------------------------------------------------------------

    async def seen(self, room_id: str, event: Mapping[str, Any] | None) -> None:
        """The room is end-to-end encrypted: recorded once; refused when support is off."""
        event_id = event.get("event_id") if event is not None else None
        if self.off is not None:
            if event is not None:
                await self.refuse(room_id, event)
            return
        if room_id not in self.rooms:
            self.rooms.add(room_id)
            await self._mark_encrypted(event_id if isinstance(event_id, str) else None, room_id)
            log.info("matrix room is end-to-end encrypted; messages decrypted", room=room_id)
        elif isinstance(event_id, str):
            await self._mark_seen(event_id, room_id)

    async def refuse(self, room_id: str, event: Mapping[str, Any]) -> None:
        """No encryption here and the room is encrypted: say once that it cannot be read."""
        event_id = event.get("event_id")
        if room_id in self.rooms:
            if isinstance(event_id, str):
                await self._mark_seen(event_id, room_id)
            return
        self.rooms.add(room_id)
        await self._mark_encrypted(event_id if isinstance(event_id, str) else None, room_id)
        log.warning("matrix room is end-to-end encrypted; refused", room=room_id, reason=self.off)
        key = f"enc-{uuid.uuid5(uuid.NAMESPACE_URL, room_id).hex[:16]}"
        text = ENCRYPTED_NOTICE.format(bot=self.user_id, why=self.off or "no device keys")
        self._queue(Reply(key, room_id, text, notice=True))

    def decrypt(self, room_id: str, event: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.crypto.decrypt(room_id, event) if self.crypto is not None else None

    async def hold(self, room_id: str, event: Mapping[str, Any]) -> None:
        """No key for a person's encrypted message: held for its key; one notice says so."""
        event_id = str(event.get("event_id"))
        raw = dict(event)
        while len(self.held) >= HELD_MAX:
            oldest = next(iter(self.held))
            log.warning("matrix message dropped while waiting for its key", event_id=oldest)
            self.held.pop(oldest)
            await anyio.to_thread.run_sync(self.store.unhold, oldest)
        self.held[event_id] = (room_id, raw)
        await anyio.to_thread.run_sync(self.store.hold, room_id, raw)
        self.undecrypted += 1
        device = self.crypto.device_id if self.crypto is not None else "?"
        key = f"undecrypted-{uuid.uuid5(uuid.NAMESPACE_URL, event_id).hex[:16]}"
        text = UNDECRYPTABLE_NOTICE.format(event=event_id, device=device)
        self._queue(Reply(key, room_id, text, notice=True))

    # -- the sender's side -----------------------------------------------------------------

    def encrypts(self, room_id: str) -> bool:
        return room_id in self.rooms and self.off is None

    async def send(self, room_id: str, txn_id: str, content: dict[str, Any]) -> None:
        """Encrypted, once the device's keys are loaded (the sender waits for the connect)."""
        await self._ready.wait()
        assert self.crypto is not None
        await self.crypto.send(room_id, txn_id, content)
