"""The Matrix channel: the person's conversation with the trunk, through a bot account.

One bot account on the person's homeserver, spoken to over the client-server API with httpx;
end-to-end encrypted rooms through matrix-nio's Olm/Megolm machine (`matrix_crypto`), fed by
this channel's own sync, or refused with one notice where that is not installed (see
docs/channels.md, Encryption). A sync loop reads the configured rooms; a message from an allowed sender goes into the trunk's
durable inbox exactly like a socket message, and the reply goes back to its room as one
message when the turn is done (split at paragraph boundaries when long), with a typing
indicator while the turn runs. Notices from the outbox (reminders, task results, the morning
greeting) come here when the courier finds no local client of the person's open.

Exactly once, across restarts, reconnects and replayed syncs (files: `matrix_store`):

- Every event taken is recorded in `seen.jsonl` after the inbox has it on disk; the inbox
  entry carries `matrix <room> <event>` as its client message id, so a crash between the two
  is read back from the inbox at the next start.
- The sync position moves on only once every event of the batch is taken, so messages sent
  while the daemon was down arrive in the next sync (a gap is read from the room's history).
- A reply or notice is kept in `outbox.jsonl` until the homeserver confirmed it, and is sent
  with a transaction id of its own, so a resend after a reconnect is not a second message; a
  notice is marked delivered in the outbox only then.
- Turns still pending in the inbox at start (the daemon stopped mid-reply) get their listener
  back before the trunk starts answering, so their reply reaches the room.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from daemon.agent.trunk import Trunk
from daemon.agent.turns import Delta, ToolPhase, TurnDone, TurnEvent, TurnFailed
from daemon.channels.matrix_api import (
    BACKOFF_MAX_S,
    SYNC_TIMEOUT_MS,
    TYPING_MS,
    MatrixApi,
    MatrixAway,
    MatrixConfigError,
    MatrixRefused,
    matrix_token,
)
from daemon.channels.matrix_approvals import RoomApprovals, answer_word
from daemon.channels.matrix_e2ee import RoomEncryption
from daemon.channels.matrix_store import MatrixStore, Reply, client_msg_id, parse_client_msg_id
from daemon.channels.matrix_text import edited_event, message_text, notice_text, split_reply
from daemon.chat.protocol import ErrorCode
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.schedule.outbox import Notice
from daemon.settings import MatrixSettings
from daemon.tools.approvals import Approvals

log = get_logger("matrix")

BACKOFF_BASE_S = 1.0
# A sync gap is filled from the room's history, 100 events a page, at most this many pages.
BACKFILL_PAGES = 50


@dataclass
class ChannelState:
    """What `status` and `doctor` show of the channel."""

    state: str = "starting"
    detail: str = ""
    since: float = field(default_factory=time.time)
    last_sync: float | None = None
    # While away or retrying: the wait before the next attempt, and when that is.
    backoff_s: float | None = None
    retry_at: float | None = None
    taken: int = 0
    ignored: int = 0
    replies_sent: int = 0
    notices_sent: int = 0
    failures: int = 0


class MatrixChannel:
    """The channel's service: the sync loop, the reply sender, and its state for `status`."""

    def __init__(
        self,
        settings: MatrixSettings,
        trunk: Trunk,
        root: Path,
        *,
        environ: Mapping[str, str] | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.settings = settings
        self.trunk = trunk
        self.store = MatrixStore(root)
        self.status = ChannelState()
        self._environ = environ
        self._rooms = set(settings.rooms)
        self._allow = set(settings.allow)
        self._seen: set[str] = set()
        self._api: MatrixApi | None = None
        self._send, self._to_send = anyio.create_memory_object_stream[Reply](1000)
        # The room each Matrix turn came from; the turns each room waits on (typing shows).
        self._turn_room: dict[str, str] = {}
        self._waiting: dict[str, set[str]] = {}
        self._typing_changed = anyio.Event()
        self.approvals = RoomApprovals(approvals, turn_room=self._turn_room, queue=self._queue)
        # Rooms the bot is in, where the person last wrote; the encrypted rooms.
        self._joined: set[str] = set()
        self._last_room: str | None = None
        self.e2ee = RoomEncryption(
            self.store,
            settings.user_id,
            self._queue,
            mark_encrypted=self._mark_encrypted,
            mark_seen=lambda event_id, room_id: self._mark(event_id, room_id, None),
        )
        # Notices: what the courier handed over (until confirmed), and the courier's hooks.
        self._notice_ids: set[str] = set()
        self._offer: Callable[[], Awaitable[int]] | None = None
        self._confirm: Callable[[list[str]], Awaitable[int]] | None = None

    def describe(self) -> dict[str, Any]:
        s = self.status
        return {
            "state": s.state,
            "detail": s.detail,
            "since": s.since,
            "homeserver": self.settings.homeserver,
            "user_id": self.settings.user_id,
            "rooms": len(self._rooms),
            "encrypted_rooms": sorted(self.e2ee.refused()),
            "e2ee": self.e2ee.describe(),
            "notice_room": self._notice_room(),
            "last_sync": s.last_sync,
            "backoff_s": round(s.backoff_s, 1) if s.backoff_s is not None else None,
            "retry_at": s.retry_at,
            "taken": s.taken,
            "ignored": s.ignored,
            "replies_sent": s.replies_sent,
            "notices_sent": s.notices_sent,
            "failures": s.failures,
        }

    def _set(self, state: str, detail: str = "", *, backoff: float | None = None) -> None:
        if (state, detail) != (self.status.state, self.status.detail):
            self.status.state, self.status.detail = state, detail
            self.status.since = time.time()
        self.status.backoff_s = backoff
        self.status.retry_at = time.time() + backoff if backoff is not None else None

    # -- notices (the courier's side: `daemon.schedule.courier.NoticeChannel`) --------------

    name = "matrix"

    def bind_notices(
        self, *, offer: Callable[[], Awaitable[int]], confirm: Callable[[list[str]], Awaitable[int]]
    ) -> None:
        """The courier's hooks: ask for what is pending; mark notices delivered."""
        self._offer, self._confirm = offer, confirm

    def _notice_room(self) -> str | None:
        """Where a notice goes: the room the person last wrote in, else the first one joined."""
        refused = self.e2ee.refused()
        usable = [r for r in self.settings.rooms if r in self._joined and r not in refused]
        if self._last_room in usable:
            return self._last_room
        return usable[0] if usable else None

    def takes_notices(self) -> bool:
        return (
            self._confirm is not None
            and self.status.state not in ("refused", "starting")
            and self._notice_room() is not None
        )

    def holds_notice(self, notice_id: str) -> bool:
        return notice_id in self._notice_ids

    def deliver_notice(self, notice: Notice) -> bool:
        """Queue a notice for the room; False when it is already on its way."""
        room = self._notice_room()
        if notice.id in self._notice_ids or room is None:
            return False
        self._notice_ids.add(notice.id)
        self._queue(Reply(f"notice-{notice.id}", room, notice_text(notice), True, notice.id))
        log.info("notice queued for matrix", notice=notice.id, kind=notice.kind, room=room)
        return True

    # -- start ------------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Attach to the turns left pending, then sync and send until cancelled."""
        await anyio.to_thread.run_sync(self.store.prepare)
        seen = await anyio.to_thread.run_sync(self.store.seen)
        self._seen, self._last_room = seen.events, seen.last_room
        self.e2ee.load(seen.encrypted, await anyio.to_thread.run_sync(self.store.held), seen.events)
        for entry in self.trunk.inbox.pending():
            where = parse_client_msg_id(entry.client_msg_id)
            if where is not None:
                self._seen.add(where[1])
                self._track(entry.id, where[0])
        await anyio.to_thread.run_sync(self.store.compact_outbox)
        for reply in await anyio.to_thread.run_sync(self.store.pending_replies):
            if reply.notice_id is not None:
                self._notice_ids.add(reply.notice_id)
            self._send.send_nowait(reply)
        try:
            token = matrix_token(self.settings, self._environ)
        except MatrixConfigError as exc:
            self._set("refused", str(exc))
            log.error("matrix channel not started", reason=str(exc))
            task_status.started()
            return
        # Questions of turns that came through Matrix are put to the person in their room.
        self.approvals.attach()
        task_status.started()
        try:
            await self._supervise(token)
        finally:
            self.approvals.detach()

    async def _supervise(self, token: str) -> None:
        restarts = 0
        while True:
            # A failure of the channel's own never takes the daemon down: logged, restarted
            # with backoff (the files hold everything it needs to pick up where it was).
            self._api = MatrixApi(self.settings.homeserver, token)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._sender, name="matrix-sender")
                    tg.start_soon(self._typist, name="matrix-typing")
                    await self._sync_loop()
                    tg.cancel_scope.cancel()
                return  # refused for good (another account's token): status says why
            except Exception as exc:
                restarts += 1
                self.status.failures += 1
                wait = _backoff(restarts)
                self._set("restarting", f"{type(exc).__name__}: {exc}", backoff=wait)
                log.exception("matrix channel failed; restarting", restarts=restarts)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._api.aclose()
                await self.e2ee.close()
            await anyio.sleep(wait)

    def _track(self, turn_id: str, room_id: str) -> None:
        self._turn_room[turn_id] = room_id
        self._waiting.setdefault(room_id, set()).add(turn_id)
        self._typing_changed.set()

        def observer(event: TurnEvent, room: str = room_id) -> None:
            self._on_turn(room, event)

        self.trunk.attach(turn_id, observer)

    def _on_turn(self, room_id: str, event: TurnEvent) -> None:
        if isinstance(event, Delta | ToolPhase):
            return
        if isinstance(event, TurnFailed) and event.code is ErrorCode.MODEL_UNAVAILABLE:
            # The turn is kept and will be answered: say so once, keep waiting.
            self._queue(Reply(f"{event.turn_id}-wait", room_id, event.message, notice=True))
            return
        waiting = self._waiting.get(room_id)
        if waiting is not None:
            waiting.discard(event.turn_id)
            self._typing_changed.set()
        if isinstance(event, TurnDone):
            self._queue(Reply(event.turn_id, room_id, event.text))
        elif isinstance(event, TurnFailed):
            self._queue(Reply(event.turn_id, room_id, f"(no reply: {event.message})", notice=True))

    def _queue(self, reply: Reply) -> None:
        try:
            self._send.send_nowait(reply)
        except anyio.WouldBlock:
            log.error("matrix reply queue full; reply kept in the transcript only", key=reply.key)

    # -- the sync loop ----------------------------------------------------------------------

    async def _connect(self) -> bool:
        """Check the token is the bot's and learn its rooms; False when refused for good."""
        assert self._api is not None
        me, device = await self._api.account()
        if me != self.settings.user_id:
            self._set("refused", f"the access token is {me}'s, not {self.settings.user_id}'s")
            log.error("matrix token belongs to another account", token_user=me)
            return False
        await self.e2ee.open(self.store.root, self.settings.homeserver, device, self._api.token)
        self._joined = set(await self._api.joined_rooms())
        self._set("connected")
        if self._offer is not None:
            try:
                # What waited in the outbox while the channel was down, if no chat is open.
                await self._offer()
            except Exception:
                log.exception("pending notices not offered to matrix")
        return True

    async def _sync_loop(self) -> None:
        assert self._api is not None
        since = await anyio.to_thread.run_sync(self.store.next_batch)
        failures = 0
        checked = False
        while True:
            try:
                if not checked:
                    if not await self._connect():
                        return
                    checked = True
                timeout = 0 if since is None else SYNC_TIMEOUT_MS
                batch = await self._api.sync(since, timeout)
                # Room keys and device changes first: this batch's messages may need them, and
                # a message held for its key is taken once the key is here.
                due = await self.e2ee.receive(batch)
                for n, (room_id, held) in enumerate(due):
                    try:
                        await self._take_event(room_id, held, first=False)
                    except BaseException:
                        self.e2ee.hold_again(due[n:])  # taken at the next key, or restart
                        raise
                    await self.e2ee.release(str(held.get("event_id")))
                await self._take(batch, since=since)
                token = batch.get("next_batch")
                if isinstance(token, str) and token:
                    await anyio.to_thread.run_sync(self.store.save_next_batch, token)
                    since = token
                self.status.last_sync = time.time()
                self._set("connected")
                failures = 0
            except MatrixRefused as exc:
                failures += 1
                self.status.failures += 1
                if exc.errcode == "M_UNKNOWN_TOKEN" or exc.status == 401:
                    why = f"the homeserver refused the access token ({exc})"
                    self._set("refused", why, backoff=BACKOFF_MAX_S)
                    log.error("matrix access token refused", error=str(exc))
                    await anyio.sleep(BACKOFF_MAX_S)
                    continue
                wait = _backoff(failures)
                self._set("retrying", str(exc), backoff=wait)
                log.warning("matrix request refused; retrying", error=str(exc), wait_s=wait)
                await anyio.sleep(wait)
            except (MatrixAway, _InboxRefused) as exc:
                failures += 1
                self.status.failures += 1
                wait = _backoff(failures)
                self._set("away", str(exc), backoff=wait)
                log.warning("matrix homeserver away; retrying", error=str(exc), wait_s=wait)
                await anyio.sleep(wait)

    async def _take(self, batch: Mapping[str, Any], *, since: str | None) -> None:
        """Take a sync batch's messages into the inbox; join invited configured rooms."""
        assert self._api is not None
        first = since is None
        rooms = _mapping(batch.get("rooms"))
        for room_id in _mapping(rooms.get("invite")):
            if room_id in self._rooms:
                await self._api.join(room_id)
                self._joined.add(room_id)
                log.info("joined a configured matrix room", room=room_id)
            else:
                log.info("invite to an unconfigured matrix room ignored", room=room_id)
        for room_id in _mapping(rooms.get("leave")):
            self._joined.discard(room_id)
        for room_id, room in _mapping(rooms.get("join")).items():
            if room_id not in self._rooms or not isinstance(room, Mapping):
                continue
            self._joined.add(room_id)
            state = _mapping(room.get("state")).get("events")
            for event in state if isinstance(state, list) else []:
                # The room's state before the timeline: an encryption event marks it encrypted.
                if isinstance(event, Mapping) and event.get("type") == "m.room.encryption":
                    await self.e2ee.seen(room_id, event)
            timeline = _mapping(room.get("timeline"))
            events = timeline.get("events")
            if not isinstance(events, list):
                continue
            prev = timeline.get("prev_batch")
            if timeline.get("limited") and since is not None and isinstance(prev, str):
                # More happened than one sync carries (a long stop): the rest, oldest first.
                events = await self._backfill(room_id, prev, since) + events
            for event in events:
                if isinstance(event, Mapping):
                    await self._take_event(room_id, event, first=first)

    async def _backfill(self, room_id: str, start: str, since: str) -> list[Any]:
        """The room's events between `since` and `start` (a gap in the sync), oldest first."""
        assert self._api is not None
        older: list[Any] = []
        token = start
        for _ in range(BACKFILL_PAGES):
            page = await self._api.messages(room_id, token, since)
            chunk = page.get("chunk")
            if not isinstance(chunk, list) or not chunk:
                break
            older.extend(chunk)
            end = page.get("end")
            if not isinstance(end, str) or end == token:
                break
            token = end
        else:
            log.warning("matrix gap longer than the backfill reaches", room=room_id)
        log.info("matrix sync gap filled", room=room_id, events=len(older))
        older.reverse()
        return older

    async def _take_event(self, room_id: str, event: Mapping[str, Any], *, first: bool) -> None:
        event_id = event.get("event_id")
        sender = event.get("sender")
        kind = event.get("type")
        if not isinstance(event_id, str) or event_id in self._seen or event_id in self.e2ee.held:
            return
        if kind == "m.room.encryption":
            await self.e2ee.seen(room_id, event)
            return
        if kind == "m.room.encrypted":
            await self.e2ee.seen(room_id, None)
            if self.e2ee.crypto is None:
                await self.e2ee.refuse(room_id, event)
                return
            if sender != self.settings.user_id and not first:
                if sender not in self._allow:
                    await self._ignore(room_id, event_id, sender)
                    return
                clear = self.e2ee.decrypt(room_id, event)
                if clear is None:
                    await self.e2ee.hold(room_id, event)
                    return
                event, kind = clear, clear.get("type")
        if sender == self.settings.user_id or kind not in ("m.room.message", "m.room.redaction"):
            return
        if first:
            # History from before the channel first synced is not answered.
            await self._mark(event_id, room_id, None)
            return
        if sender not in self._allow:
            await self._ignore(room_id, event_id, sender)
            return
        if room_id in self.e2ee.refused():
            # Its room was refused (one notice said so): a plain message there is not answered
            # either, since the reply would go out unencrypted into a room meant to be private.
            log.info("matrix message in an encrypted room not taken", room=room_id)
            await self._mark(event_id, room_id, None)
            return
        if kind == "m.room.redaction":
            redacts = event.get("redacts") or _mapping(event.get("content")).get("redacts")
            if redacts in self._seen:
                log.info(
                    "matrix message redacted after it was taken", room=room_id, event_id=redacts
                )
            await self._mark(event_id, room_id, None)
            return
        text = message_text(event)
        if text is None:
            if edited_event(event) is not None:
                log.info("matrix edit not answered again", room=room_id, event_id=event_id)
            else:
                log.info("matrix event skipped (not a message the trunk reads)", event_id=event_id)
            await self._mark(event_id, room_id, None)
            return
        decision = answer_word(text)
        if decision is not None and self.approvals.asking(room_id):
            await self._mark(event_id, room_id, None)
            self.approvals.answer(room_id, decision)
            return
        refusal = self.trunk.refusal()
        if refusal is not None:
            raise _InboxRefused(refusal)
        try:
            accepted = await self.trunk.submit(text, client_msg_id=client_msg_id(room_id, event_id))
        except OSError as exc:
            raise _InboxRefused(f"message not saved: {exc}") from None
        self._seen.add(event_id)
        self._track(accepted.turn_id, room_id)
        await self._mark(event_id, room_id, accepted.turn_id)
        self._last_room = room_id
        self.status.taken += 1
        log.info("matrix message taken", room=room_id, turn_id=accepted.turn_id)

    async def _ignore(self, room_id: str, event_id: str, sender: Any) -> None:
        self.status.ignored += 1
        log.warning(
            "matrix message from a sender not allowed; ignored", room=room_id, sender=sender
        )
        await self._mark(event_id, room_id, None)

    async def _mark_encrypted(self, event_id: str | None, room_id: str) -> None:
        if event_id is not None:
            self._seen.add(event_id)
        rec = {"event": event_id or f"encrypted {room_id}", "room": room_id, "encrypted": True}
        await anyio.to_thread.run_sync(self.store.mark_seen, [rec])

    async def _mark(self, event_id: str, room_id: str, turn_id: str | None) -> None:
        self._seen.add(event_id)
        rec = {"event": event_id, "room": room_id, "turn": turn_id}
        await anyio.to_thread.run_sync(self.store.mark_seen, [rec])

    # -- replies and typing -----------------------------------------------------------------

    async def _sender(self) -> None:
        assert self._api is not None
        async for reply in self._to_send:
            await anyio.to_thread.run_sync(self.store.put_reply, reply)
            failures = 0
            sent = False
            while True:
                try:
                    for i, piece in enumerate(split_reply(reply.text)):
                        content = {
                            "msgtype": "m.notice" if reply.notice else "m.text",
                            "body": piece,
                        }
                        await self._send_one(reply.room_id, f"{reply.key}.{i}", content)
                    sent = True
                    break
                except (MatrixAway, MatrixRefused) as exc:
                    failures += 1
                    if isinstance(exc, MatrixRefused) and exc.status in (400, 403, 404):
                        log.error("matrix reply refused; dropped", key=reply.key, error=str(exc))
                        break
                    await anyio.sleep(_backoff(failures))
            await anyio.to_thread.run_sync(self.store.reply_sent, reply.key)
            if reply.notice_id is None:
                self.status.replies_sent += 1
            elif sent:
                await self._notice_sent(reply.notice_id)

    async def _send_one(self, room_id: str, txn_id: str, content: dict[str, Any]) -> None:
        """One message: encrypted in an encrypted room (once the device's keys are loaded)."""
        assert self._api is not None
        if self.e2ee.encrypts(room_id):
            await self.e2ee.send(room_id, txn_id, content)
        else:
            await self._api.send(room_id, txn_id, content)

    async def _notice_sent(self, notice_id: str) -> None:
        self.status.notices_sent += 1
        log.info("notice delivered over matrix", notice=notice_id)
        if self._confirm is not None:
            try:
                await self._confirm([notice_id])
            except Exception:
                # The store is away: the notice stays pending, and a resend carries the same
                # transaction id (deduplicated by the homeserver while it remembers it).
                log.exception("matrix notice sent but not marked delivered", notice=notice_id)
                self._notice_ids.discard(notice_id)

    async def _typist(self) -> None:
        """Keep the typing indicator on in each room while a turn for it runs."""
        assert self._api is not None
        # A daemon stopped mid-turn may have left the indicator on: every room starts as shown,
        # so the first round turns it off where no turn runs now.
        shown: set[str] = set(self._rooms)
        while True:
            self._typing_changed = anyio.Event()
            want = {room for room, turns in self._waiting.items() if turns}
            for room in want | shown:
                on = room in want
                try:
                    await self._api.typing(room, self.settings.user_id, on)
                except (MatrixAway, MatrixRefused):
                    continue
                if on:
                    shown.add(room)
                else:
                    shown.discard(room)
            with anyio.move_on_after(TYPING_MS / 1000 * 0.8 if want else 3600):
                await self._typing_changed.wait()


class _InboxRefused(ReverieError):
    """The trunk's inbox cannot take a message now; the sync position stays where it is."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _backoff(failures: int) -> float:
    base = min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2 ** min(failures - 1, 10)))
    return base * random.uniform(0.75, 1.0)
