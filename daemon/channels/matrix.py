"""The Matrix channel: the person's conversation with the trunk, through a bot account.

One bot account on the person's homeserver, spoken to over the client-server API with httpx
(unencrypted rooms; see docs/channels.md). A sync loop reads the configured rooms; a message
from an allowed sender goes into the trunk's durable inbox exactly like a socket message, and
the reply goes back to its room as one message when the turn is done (split at paragraph
boundaries when long), with a typing indicator while the turn runs.

Size: the sync loop, the reply outbox and the room-history catch-up share one state (the
sync position, the seen events, the pending replies); split with the courier work to come.

Exactly once, across restarts, reconnects and replayed syncs:

- Every event taken is recorded in `seen.jsonl` (event id, room, turn id) after the inbox has
  it on disk; the inbox entry itself carries `matrix <room> <event>` as its client message id,
  so a crash between the two is read back from the inbox at the next start.
- The sync position (`sync.json`, replaced atomically) moves on only once every event of the
  batch is taken, so messages sent while the daemon was down arrive in the next sync.
- A reply is kept in `outbox.jsonl` until the homeserver confirmed it; it is sent with the turn
  id as its transaction id, so a resend after a reconnect is not a second message.
- Turns still pending in the inbox at start (the daemon stopped mid-reply) get their listener
  back before the trunk starts answering, so their reply reaches the room.

Files live in `<home>/channels/matrix/` (0700 directory, 0600 files).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Mapping
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
    MatrixRefused,
)
from daemon.chat.protocol import ApprovalAnswer, ErrorCode
from daemon.durable import append_lines, read_jsonl, write_atomic
from daemon.log import get_logger
from daemon.settings import MatrixSettings
from daemon.tools.approvals import ApprovalRefused, Approvals

log = get_logger("matrix")

TOKEN_ENV = "REVERIE_MATRIX_TOKEN"
TOKEN_CREDENTIAL = "reverie-matrix-token"
CLIENT_ID_PREFIX = "matrix "
# A Matrix event is at most 65536 bytes of JSON: bodies are kept well under it.
MAX_BODY_CHARS = 12_000
# A message longer than this is cut (with a note) before it reaches the inbox.
MAX_INCOMING_CHARS = 32_000
BACKOFF_BASE_S = 1.0
# A sync gap is filled from the room's history, 100 events a page, at most this many pages.
BACKFILL_PAGES = 50


class MatrixConfigError(Exception):
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


def split_reply(text: str, limit: int = MAX_BODY_CHARS) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at paragraphs, then lines, then words."""
    text = text.strip()
    if not text:
        return []
    pieces: list[str] = []
    while len(text) > limit:
        window = text[:limit]
        cut = -1
        for sep in ("\n\n", "\n", " "):
            cut = window.rfind(sep)
            if cut > limit // 4:
                break
        if cut <= limit // 4:
            cut = limit
        pieces.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


@dataclass
class _Reply:
    turn_id: str
    room_id: str
    text: str
    notice: bool = False


@dataclass
class ChannelState:
    """What `status` and `doctor` show of the channel."""

    state: str = "starting"
    detail: str = ""
    since: float = field(default_factory=time.time)
    last_sync: float | None = None
    taken: int = 0
    ignored: int = 0
    replies_sent: int = 0
    failures: int = 0


class MatrixStore:
    """The channel's files: sync position, seen events, replies not yet confirmed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sync_file = root / "sync.json"
        self.seen_file = root / "seen.jsonl"
        self.outbox_file = root / "outbox.jsonl"

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def next_batch(self) -> str | None:
        try:
            data = json.loads(self.sync_file.read_text())
        except (OSError, ValueError):
            return None
        value = data.get("next_batch") if isinstance(data, dict) else None
        return value if isinstance(value, str) and value else None

    def save_next_batch(self, token: str) -> None:
        write_atomic(self.sync_file, json.dumps({"next_batch": token}), mode=0o600)

    def seen(self) -> set[str]:
        return {str(r["event"]) for r in read_jsonl(self.seen_file) if "event" in r}

    def mark_seen(self, records: list[dict[str, Any]]) -> None:
        append_lines(self.seen_file, [json.dumps(r) for r in records])

    def pending_replies(self) -> list[_Reply]:
        pending: dict[str, _Reply] = {}
        for rec in read_jsonl(self.outbox_file):
            tid = rec.get("turn")
            if not isinstance(tid, str):
                continue
            if rec.get("op") == "put":
                pending[tid] = _Reply(
                    tid, str(rec.get("room")), str(rec.get("text", "")), bool(rec.get("notice"))
                )
            elif rec.get("op") == "sent":
                pending.pop(tid, None)
        return list(pending.values())

    def compact_outbox(self) -> None:
        lines = [
            json.dumps(
                {
                    "op": "put",
                    "turn": r.turn_id,
                    "room": r.room_id,
                    "text": r.text,
                    "notice": r.notice,
                }
            )
            for r in self.pending_replies()
        ]
        write_atomic(self.outbox_file, "".join(line + "\n" for line in lines), mode=0o600)

    def put_reply(self, reply: _Reply) -> None:
        rec = {
            "op": "put",
            "turn": reply.turn_id,
            "room": reply.room_id,
            "text": reply.text,
            "notice": reply.notice,
        }
        append_lines(self.outbox_file, [json.dumps(rec, ensure_ascii=False)])

    def reply_sent(self, turn_id: str) -> None:
        append_lines(self.outbox_file, [json.dumps({"op": "sent", "turn": turn_id})])


def client_msg_id(room_id: str, event_id: str) -> str:
    return f"{CLIENT_ID_PREFIX}{room_id} {event_id}"


def parse_client_msg_id(value: str | None) -> tuple[str, str] | None:
    """(room, event) of an inbox entry that came from Matrix, else None."""
    if not value or not value.startswith(CLIENT_ID_PREFIX):
        return None
    parts = value[len(CLIENT_ID_PREFIX) :].split(" ")
    return (parts[0], parts[1]) if len(parts) == 2 else None


def message_text(event: Mapping[str, Any]) -> str | None:
    """What an `m.room.message` event says, as the person's message; None to skip it."""
    content = event.get("content")
    if not isinstance(content, Mapping):
        return None
    relates = content.get("m.relates_to")
    if isinstance(relates, Mapping) and relates.get("rel_type") == "m.replace":
        return None  # an edit of an earlier message: that one was answered already
    kind = content.get("msgtype")
    body = content.get("body")
    if not isinstance(body, str):
        return None
    if kind in ("m.text", "m.notice"):
        text = body
    elif kind == "m.emote":
        text = f"* {body}"
    elif kind in ("m.image", "m.file", "m.audio", "m.video"):
        info = content.get("info") if isinstance(content.get("info"), Mapping) else {}
        size = info.get("size") if isinstance(info, Mapping) else None
        what = kind.removeprefix("m.")
        sized = f", {size} bytes" if isinstance(size, int) else ""
        text = (
            f"[sent a {what} over Matrix: {body!r}{sized} — the channel does not fetch media, "
            "so only its name is known]"
        )
    else:
        return None
    text = text.strip()
    if not text:
        return None
    if len(text) > MAX_INCOMING_CHARS:
        cut = len(text) - MAX_INCOMING_CHARS
        text = text[:MAX_INCOMING_CHARS] + f"\n[… {cut} more characters cut by the Matrix channel]"
    return text


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
        self.approvals = approvals
        self._door = _ApprovalDoor(self, approvals.person_uid if approvals is not None else -1)
        # The room each Matrix turn came from, and the question each room is asked now.
        self._turn_room: dict[str, str] = {}
        self._asking: dict[str, str] = {}
        self.trunk = trunk
        self.store = MatrixStore(root)
        self.status = ChannelState()
        self._environ = environ
        self._rooms = set(settings.rooms)
        self._allow = set(settings.allow)
        self._seen: set[str] = set()
        self._api: MatrixApi | None = None
        self._send, self._to_send = anyio.create_memory_object_stream[_Reply](1000)
        # Turns each room is waiting on (typing is shown while any is).
        self._waiting: dict[str, set[str]] = {}
        self._typing_changed = anyio.Event()

    def describe(self) -> dict[str, Any]:
        s = self.status
        return {
            "state": s.state,
            "detail": s.detail,
            "homeserver": self.settings.homeserver,
            "user_id": self.settings.user_id,
            "rooms": len(self._rooms),
            "last_sync": s.last_sync,
            "taken": s.taken,
            "ignored": s.ignored,
            "replies_sent": s.replies_sent,
            "failures": s.failures,
        }

    def _set(self, state: str, detail: str = "") -> None:
        if (state, detail) != (self.status.state, self.status.detail):
            self.status.state, self.status.detail = state, detail
            self.status.since = time.time()

    # -- start ------------------------------------------------------------------------------

    async def serve(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Attach to the turns left pending, then sync and send until cancelled."""
        await anyio.to_thread.run_sync(self.store.prepare)
        self._seen = await anyio.to_thread.run_sync(self.store.seen)
        for entry in self.trunk.inbox.pending():
            where = parse_client_msg_id(entry.client_msg_id)
            if where is not None:
                self._seen.add(where[1])
                self._track(entry.id, where[0])
        await anyio.to_thread.run_sync(self.store.compact_outbox)
        for reply in await anyio.to_thread.run_sync(self.store.pending_replies):
            self._send.send_nowait(reply)
        try:
            token = matrix_token(self.settings, self._environ)
        except MatrixConfigError as exc:
            self._set("refused", str(exc))
            log.error("matrix channel not started", reason=str(exc))
            task_status.started()
            return
        if self.approvals is not None:
            # Questions of turns that came through Matrix are put to the person in their room.
            self.approvals.attach(self._door)
        task_status.started()
        try:
            await self._supervise(token)
        finally:
            if self.approvals is not None:
                self.approvals.detach(self._door)

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
                self._set("restarting", f"{type(exc).__name__}: {exc}")
                log.exception("matrix channel failed; restarting", restarts=restarts)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._api.aclose()
            await anyio.sleep(_backoff(restarts))

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
            self._queue(_Reply(f"{event.turn_id}-wait", room_id, event.message, notice=True))
            return
        waiting = self._waiting.get(room_id)
        if waiting is not None:
            waiting.discard(event.turn_id)
            self._typing_changed.set()
        if isinstance(event, TurnDone):
            self._queue(_Reply(event.turn_id, room_id, event.text))
        elif isinstance(event, TurnFailed):
            self._queue(_Reply(event.turn_id, room_id, f"(no reply: {event.message})", notice=True))

    def _queue(self, reply: _Reply) -> None:
        try:
            self._send.send_nowait(reply)
        except anyio.WouldBlock:
            log.error(
                "matrix reply queue full; reply kept in the transcript only", turn=reply.turn_id
            )

    # -- the sync loop ----------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        assert self._api is not None
        since = await anyio.to_thread.run_sync(self.store.next_batch)
        failures = 0
        checked = False
        while True:
            try:
                if not checked:
                    me = await self._api.whoami()
                    if me != self.settings.user_id:
                        self._set(
                            "refused",
                            f"the access token is {me}'s, not {self.settings.user_id}'s",
                        )
                        log.error("matrix token belongs to another account", token_user=me)
                        return
                    checked = True
                timeout = 0 if since is None else SYNC_TIMEOUT_MS
                batch = await self._api.sync(since, timeout)
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
                    self._set("refused", f"the homeserver refused the access token ({exc})")
                    log.error("matrix access token refused", error=str(exc))
                    await anyio.sleep(BACKOFF_MAX_S)
                    continue
                self._set("retrying", str(exc))
                log.warning("matrix request refused; retrying", error=str(exc))
                await anyio.sleep(_backoff(failures))
            except (MatrixAway, _InboxRefused) as exc:
                failures += 1
                self.status.failures += 1
                self._set("away", str(exc))
                wait = _backoff(failures)
                log.warning("matrix homeserver away; retrying", error=str(exc), wait_s=wait)
                await anyio.sleep(wait)

    async def _take(self, batch: Mapping[str, Any], *, since: str | None) -> None:
        """Take a sync batch's messages into the inbox; join invited configured rooms."""
        assert self._api is not None
        first = since is None
        rooms = batch.get("rooms") if isinstance(batch.get("rooms"), Mapping) else {}
        assert isinstance(rooms, Mapping)
        invites = rooms.get("invite") if isinstance(rooms.get("invite"), Mapping) else {}
        assert isinstance(invites, Mapping)
        for room_id in invites:
            if room_id in self._rooms:
                await self._api.join(room_id)
                log.info("joined a configured matrix room", room=room_id)
            else:
                log.info("invite to an unconfigured matrix room ignored", room=room_id)
        joined = rooms.get("join") if isinstance(rooms.get("join"), Mapping) else {}
        assert isinstance(joined, Mapping)
        for room_id, room in joined.items():
            if room_id not in self._rooms or not isinstance(room, Mapping):
                continue
            timeline = room.get("timeline") if isinstance(room.get("timeline"), Mapping) else {}
            assert isinstance(timeline, Mapping)
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
        if not isinstance(event_id, str) or event_id in self._seen:
            return
        if event.get("type") == "m.room.encrypted":
            await self._mark(event_id, room_id, None)
            if not first:
                self._queue(
                    _Reply(
                        f"enc-{uuid.uuid5(uuid.NAMESPACE_URL, event_id).hex[:16]}",
                        room_id,
                        "This room is encrypted; the Reverie Matrix channel cannot read "
                        "encrypted messages yet. Please talk to it in an unencrypted room.",
                        notice=True,
                    )
                )
            return
        if event.get("type") != "m.room.message" or sender == self.settings.user_id:
            return
        if first:
            # History from before the channel first synced is not answered.
            await self._mark(event_id, room_id, None)
            return
        if sender not in self._allow:
            self.status.ignored += 1
            log.warning(
                "matrix message from a sender not allowed; ignored", room=room_id, sender=sender
            )
            await self._mark(event_id, room_id, None)
            return
        text = message_text(event)
        if text is None:
            await self._mark(event_id, room_id, None)
            return
        decision = _ANSWERS.get(text.strip().lower().rstrip(".!"))
        if decision is not None and room_id in self._asking:
            await self._mark(event_id, room_id, None)
            self._answer(room_id, decision)
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
        self.status.taken += 1
        log.info("matrix message taken", room=room_id, turn_id=accepted.turn_id)

    async def _mark(self, event_id: str, room_id: str, turn_id: str | None) -> None:
        self._seen.add(event_id)
        rec = {"event": event_id, "room": room_id, "turn": turn_id}
        await anyio.to_thread.run_sync(self.store.mark_seen, [rec])

    # -- approvals --------------------------------------------------------------------------

    def _approval_frame(self, frame: Mapping[str, Any]) -> bool:
        """Put a question (or its end) to the room of the turn that asks; False when none."""
        kind = frame.get("type")
        if kind == "approval":
            room = self._turn_room.get(str(frame.get("turn_id")))
            if room is None:
                return False  # not a Matrix turn: its own client is asked
            aid = str(frame.get("id"))
            self._asking[room] = aid
            preview = str(frame.get("preview") or "")
            if len(preview) > 2000:
                preview = preview[:2000] + " …"
            text = (
                f"Approval needed: {frame.get('summary')}\n"
                + (f"{preview}\n" if preview else "")
                + f"Reply yes, no or always (within {float(frame.get('timeout_s') or 0):.0f} s)."
            )
            self._queue(_Reply(f"ask-{aid}", room, text, notice=True))
            return True
        if kind == "approval_settled":
            aid = str(frame.get("id"))
            for room, asked in list(self._asking.items()):
                if asked == aid:
                    del self._asking[room]
                    if frame.get("by") != "person":
                        why = {"timeout": "no answer in time", "nobody": "nobody to ask"}.get(
                            str(frame.get("by")), str(frame.get("by"))
                        )
                        self._queue(
                            _Reply(f"settled-{aid}", room, f"Declined: {why}.", notice=True)
                        )
            return True
        return False

    def _answer(self, room_id: str, decision: ApprovalAnswer) -> None:
        aid = self._asking.get(room_id)
        if aid is None or self.approvals is None:
            return
        try:
            self.approvals.answer(self._door, aid, decision)
        except ApprovalRefused as exc:
            self._queue(_Reply(f"answer-{aid}", room_id, f"Not taken: {exc.message}", notice=True))
            return
        self._asking.pop(room_id, None)
        log.info("approval answered from matrix", approval=aid, decision=decision)

    # -- replies and typing -----------------------------------------------------------------

    async def _sender(self) -> None:
        assert self._api is not None
        async for reply in self._to_send:
            await anyio.to_thread.run_sync(self.store.put_reply, reply)
            failures = 0
            while True:
                try:
                    for i, piece in enumerate(split_reply(reply.text)):
                        content = {
                            "msgtype": "m.notice" if reply.notice else "m.text",
                            "body": piece,
                        }
                        await self._api.send(reply.room_id, f"{reply.turn_id}.{i}", content)
                    break
                except (MatrixAway, MatrixRefused) as exc:
                    failures += 1
                    if isinstance(exc, MatrixRefused) and exc.status in (400, 403, 404):
                        log.error(
                            "matrix reply refused; dropped", turn=reply.turn_id, error=str(exc)
                        )
                        break
                    await anyio.sleep(_backoff(failures))
            await anyio.to_thread.run_sync(self.store.reply_sent, reply.turn_id)
            self.status.replies_sent += 1

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


_ANSWERS: dict[str, ApprovalAnswer] = {
    "yes": "yes",
    "y": "yes",
    "no": "no",
    "n": "no",
    "always": "always",
}


class _ApprovalDoor:
    """The channel as the approvals see a client of the person's (the allowed Matrix IDs)."""

    id = "matrix"
    closed = False

    def __init__(self, channel: MatrixChannel, uid: int) -> None:
        self._channel = channel
        self.uid = uid

    def send(self, frame: Mapping[str, Any]) -> bool:
        return self._channel._approval_frame(frame)


class _InboxRefused(Exception):
    """The trunk's inbox cannot take a message now; the sync position stays where it is."""


def _backoff(failures: int) -> float:
    base = min(BACKOFF_MAX_S, BACKOFF_BASE_S * (2 ** min(failures - 1, 10)))
    return base * random.uniform(0.75, 1.0)
