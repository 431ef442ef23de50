"""Notices reach the person: pushed to their connected clients, else kept for the next chat.

The courier listens for `NoticePosted`. Outside quiet hours a new notice goes at once, as a
`notice` frame, to every connected client of the person's uid (the daemon's own uid; a
client admitted through `[chat] allow_uids` or root never gets one); the notification
command (`[notices] notify_command`) runs for it too. A client of the person's that connects
gets every pending notice right after `hello`: what came while they were away opens the chat.
No connection is sent the same notice twice.

Delivered means shown: a notice stays pending until a client of the person's that was sent it
answers `seen` with its id — what `reverie chat` does once it has printed it. A frame merely
written to a socket proves nothing: `reverie status`, `reverie schedule list` and every other
command-only connection are the person's uid too, take the frame and never show it; were that
delivery, a status check would use up the reminder that should open the next chat.

Quiet hours (`[notices] quiet_hours`, in `[scheduler] timezone`): a notice posted inside the
window is held — neither pushed nor notified — until the window ends, when a daily job on
the daemon's scheduler releases what is pending (pushed, and notified once). A person who
opens a chat inside the window sees what is pending all the same: they are up.

Channels (`[channels.matrix]`): when no client of the person's is connected, a notice goes to
the first channel that takes notices instead — when it is posted, when quiet hours end, when
the channel connects, and when the person's last local client leaves with notices it never
showed. The channel marks it delivered once its server confirmed it; a notice on its way
through a channel is not sent to a client that connects meanwhile, so it arrives once.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, time, timedelta, tzinfo
from typing import Any

import anyio

from daemon.background import BackgroundWork
from daemon.bus import EventBus
from daemon.chat import protocol
from daemon.clock import Clock
from daemon.events import NoticePosted
from daemon.log import get_logger
from daemon.schedule.outbox import Notice, Outbox
from daemon.scheduler import Scheduler, parse_hhmm
from daemon.seams import NoticeChannel as NoticeChannel
from daemon.settings import NoticesSettings

log = get_logger("notices")

# The notification command's output is only logged; this much of it.
NOTIFY_OUTPUT_CHARS = 300


def notice_frame(notice: Notice) -> dict[str, Any]:
    return protocol.notice(
        id=notice.id,
        kind=notice.kind,
        text=notice.text,
        ts=notice.created_at.isoformat(),
        due_at=notice.due_at.isoformat() if notice.due_at is not None else None,
        late_s=notice.late_s,
        schedule_id=notice.schedule_id,
    )


class QuietHours:
    """A daily window ("22:00-07:00") in the person's zone, which may wrap midnight."""

    def __init__(self, spec: str, zone: tzinfo) -> None:
        start, _, end = spec.partition("-")
        self.spec = spec
        self.start = time(*parse_hhmm(start))
        self.end = time(*parse_hhmm(end))
        self.zone = zone

    def __contains__(self, when: datetime) -> bool:
        t = when.astimezone(self.zone).time()
        if self.start < self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def opened_before(self, when: datetime) -> datetime:
        """When the last window to open at or before `when` opened."""
        local = when.astimezone(self.zone)
        opened = datetime.combine(local.date(), self.start, tzinfo=self.zone)
        if opened > local:
            opened -= timedelta(days=1)
        return opened


class NoticeCourier(BackgroundWork):
    """Delivers the outbox's notices to the person (see the module's docstring).

    An async context manager with one owner: the notification commands and the waits for a
    client's socket run in its task group, and leaving it cancels them.
    """

    def __init__(
        self,
        *,
        outbox: Outbox,
        settings: NoticesSettings,
        zone: tzinfo,
        clock: Clock,
        person_uid: int | None = None,
    ) -> None:
        self.outbox = outbox
        self.settings = settings
        self.clock = clock
        self.person_uid = os.geteuid() if person_uid is None else person_uid
        self.quiet = QuietHours(settings.quiet_hours, zone) if settings.quiet_hours else None
        self._clients: dict[str, Any] = {}
        # What each connected client was already sent, so a notice posted while it connects
        # reaches it once.
        self._sent: dict[str, set[str]] = {}
        self.notified = 0
        self._channels: list[NoticeChannel] = []

    def add_channel(self, channel: NoticeChannel) -> None:
        """Let `channel` carry notices while no client of the person's is connected."""
        self._channels.append(channel)

    def register(self, bus: EventBus, scheduler: Scheduler) -> Callable[[], None]:
        """Listen for new notices; release held ones when quiet hours end. Return the unsubscribe."""
        if self.quiet is not None:
            # Not caught up: after a night down, what is pending opens the next chat anyway.
            scheduler.add_daily(
                "notices.quiet_hours_end",
                self.release,
                at=self.quiet.end.strftime("%H:%M"),
                catch_up=False,
            )
        return bus.on(NoticePosted, self.on_posted, name="notices.deliver")

    def in_quiet_hours(self, when: datetime | None = None) -> bool:
        return self.quiet is not None and (when or self.clock.now()) in self.quiet

    # -- the person's clients ---------------------------------------------------------------

    async def attach(self, client: Any) -> bool:
        """A client connected (its `hello` is sent): if it is the person's, send what is pending."""
        if client.uid != self.person_uid:
            return False
        self._clients[client.id] = client
        self._sent.setdefault(client.id, set())
        pending = await self.outbox.pending()
        if pending:
            self._send(client, pending)
        return True

    def detach(self, client: Any) -> None:
        self._clients.pop(client.id, None)
        self._sent.pop(client.id, None)
        if self._channels and not self.connected and self._tg is not None:
            # The last local client left: what it never showed goes through a channel.
            self._tg.start_soon(self.offer, name="notices.offer")

    async def offer(self) -> int:
        """Hand what is pending to a channel when no local client is open; return how many."""
        if not self._channels or self.connected or self.in_quiet_hours():
            return 0
        return self._to_channel(await self.outbox.pending())

    def _in_channel(self, notice_id: str) -> bool:
        return any(ch.holds_notice(notice_id) for ch in self._channels)

    def _to_channel(self, notices: Sequence[Notice]) -> int:
        for channel in self._channels:
            if channel.takes_notices():
                took = sum(channel.deliver_notice(n) for n in notices)
                if took:
                    log.info("notices sent through a channel", channel=channel.name, notices=took)
                return took
        return 0

    @property
    def connected(self) -> int:
        return sum(1 for c in self._clients.values() if not c.closed)

    def murmur(self, kind: str, text: str) -> int:
        """A quiet line for the person's open chats; return how many clients took it.

        A `notice` frame with `quiet: true`: not in the outbox, so never kept for a later
        chat, never held for quiet hours or notified (no one is interrupted: it goes only to
        a chat already open). Its id counts as sent, so an older client's `seen` for it is
        accepted and changes nothing.
        """
        now = self.clock.now()
        nid = f"q-{uuid.uuid4().hex[:12]}"
        frame = protocol.notice(id=nid, kind=kind, text=text, ts=now.isoformat(), quiet=True)
        took = 0
        for client in list(self._clients.values()):
            if not client.closed and client.send(frame):
                self._sent.setdefault(client.id, set()).add(nid)
                took += 1
        log.info("quiet line pushed", kind=kind, clients=took)
        return took

    def _send(self, client: Any, notices: Sequence[Notice]) -> None:
        sent = self._sent.setdefault(client.id, set())
        for notice in notices:
            if notice.id in sent or self._in_channel(notice.id):
                continue
            if not client.send(notice_frame(notice)):
                return  # gone: what it was not sent stays pending for the next chat
            sent.add(notice.id)

    async def seen(self, client: Any, ids: Sequence[str]) -> int:
        """A client showed these notices: mark them delivered; return how many changed.

        Only a client of the person's may, and only for notices it was sent on this
        connection: anything else is refused with a `ProtocolError` (the other ids named are
        still marked). A notice already delivered or acknowledged stays as it was.
        """
        if client.uid != self.person_uid:
            raise protocol.ProtocolError(
                protocol.FORBIDDEN,
                f"uid {client.uid} may not mark notices seen: only the daemon's own "
                f"uid ({self.person_uid}) gets them",
            )
        sent = self._sent.get(client.id, set())
        shown = [i for i in dict.fromkeys(ids) if i in sent]
        changed = await self.outbox.delivered(shown)
        if changed:
            log.info("notices delivered", client=client.id, notices=changed)
        unknown = [i for i in dict.fromkeys(ids) if i not in sent]
        if unknown:
            raise protocol.ProtocolError(
                protocol.ErrorCode.UNKNOWN_NOTICE,
                f"not sent to this connection, so not marked: {', '.join(unknown[:10])}"
                + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""),
            )
        return changed

    # -- new notices, quiet hours -----------------------------------------------------------

    async def on_posted(self, event: NoticePosted) -> None:
        notice = await self.outbox.get(event.notice_id)
        if notice is None or not notice.pending:
            return
        if self.in_quiet_hours(event.created_at):
            log.info("notice held for the end of quiet hours", notice=notice.id)
            return
        self._push([notice])
        if not self.connected:
            self._to_channel([notice])
        self._notify([notice])

    async def release(self) -> str:
        """Quiet hours ended: push what is pending; notify what was held in the window."""
        pending = await self.outbox.pending()
        self._push(pending)
        if not self.connected:
            self._to_channel(pending)
        held = pending
        if self.quiet is not None:
            opened = self.quiet.opened_before(self.clock.now())
            held = [n for n in pending if n.created_at >= opened]
        self._notify(held)
        return f"pending={len(pending)} held={len(held)} clients={self.connected}"

    def _push(self, notices: Sequence[Notice]) -> None:
        for client in list(self._clients.values()):
            if not client.closed:
                self._send(client, notices)

    # -- the desktop notification -----------------------------------------------------------

    def _notify(self, notices: Sequence[Notice]) -> None:
        if not self.settings.notify_command or not notices or self._tg is None:
            return
        for notice in notices:
            self._tg.start_soon(self.notify, notice.text, name=f"notify:{notice.id}")

    async def notify(self, text: str) -> bool:
        """Run the notification command with `text` as its last argument; never raises.

        No shell: the text is one argument whatever it holds. Stopped (killed) after
        `notify_timeout_s`; a failure is logged.
        """
        argv = [*self.settings.notify_command, text]
        try:
            with anyio.fail_after(self.settings.notify_timeout_s):
                done = await anyio.run_process(
                    argv, check=False, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT
                )
        except TimeoutError:
            log.warning(
                "notification command timed out",
                command=argv[0],
                timeout_s=self.settings.notify_timeout_s,
            )
            return False
        except OSError as exc:
            log.warning("notification command failed to start", command=argv[0], error=str(exc))
            return False
        if done.returncode != 0:
            log.warning(
                "notification command failed",
                command=argv[0],
                code=done.returncode,
                output=done.stdout.decode(errors="replace")[:NOTIFY_OUTPUT_CHARS],
            )
            return False
        self.notified += 1
        return True
