"""The trunk's retry and outage state: a kept turn's backoff, and who has been told why.

A turn that cannot finish for a passing reason is kept (its message stays queued in the
inbox) and tried again after a backoff that doubles per failed attempt, up to a ceiling. Two
outages keep turns, each with its own state: the model unreachable (`WaitingForModel`) and
the home's storage refusing writes (`StorageDown`; new messages are refused meanwhile, and
the disk is tried again at least every `STORAGE_RETRY_MAX_S`). Every listener on a queued
turn is told once per outage, including listeners on messages accepted during it.

A message that arrives during a model outage cuts the backoff short: the model is tried now,
or `base_s` after the last attempt when that was only just now — a burst of messages never
hammers the API, and a message sent right after a failed try is not left behind the whole
backoff.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from daemon.agent.inbox import Inbox
from daemon.agent.listeners import Listeners
from daemon.agent.turns import TurnFailed
from daemon.chat.protocol import ErrorCode
from daemon.clock import Clock
from daemon.log import get_logger
from daemon.store.errors import free_bytes

log = get_logger("trunk")

# Space comes back when a person frees it: a kept turn tries the disk again this often at
# most, however long the model's backoff has grown.
STORAGE_RETRY_MAX_S = 30.0


@dataclass(frozen=True, kw_only=True)
class WaitingForModel:
    """The trunk's model is unreachable: queued messages are kept and retried on a backoff."""

    since: datetime
    error: str
    attempts: int
    last_attempt: datetime
    next_retry: datetime

    def describe(self, *, queued: int) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "error": self.error,
            "attempts": self.attempts,
            "last_attempt": self.last_attempt.isoformat(),
            "next_retry": self.next_retry.isoformat(),
            "queued": queued,
        }


@dataclass(frozen=True, kw_only=True)
class StorageDown:
    """The home's storage refuses writes (disk full, read-only): new messages are refused and
    the kept ones are retried until a turn gets through."""

    since: datetime
    error: str
    attempts: int
    next_retry: datetime

    def describe(self, *, queued: int, free: int | None) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "error": self.error,
            "attempts": self.attempts,
            "next_retry": self.next_retry.isoformat(),
            "queued": queued,
            "free_bytes": free,
        }


@dataclass(frozen=True, kw_only=True)
class Kept:
    """Why a turn did not finish and its message stays queued: the model gave no whole reply
    (`storage` False) or the home's storage refused a write (`storage` True)."""

    reason: str
    storage: bool = False


class TurnRetry:
    """The outages that keep the trunk's turns, the backoff between tries, and telling the
    listeners of queued turns about them (once per outage each)."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        listeners: Listeners,
        clock: Clock,
        home_root: Path,
        base_s: float,
        max_s: float,
    ) -> None:
        self.inbox = inbox
        self.listeners = listeners
        self.clock = clock
        self.home_root = home_root
        self.base_s = base_s
        self.max_s = max_s
        # Set while the model stays unreachable; cleared by the next turn that reaches it.
        self.waiting_for_model: WaitingForModel | None = None
        # Turns whose listener has been told about the current outage (told once each).
        self._told_waiting: set[str] = set()
        # The backoff being slept out: a message arriving during an outage cancels it, to try
        # the model now rather than at the end of a backoff that may have grown to minutes.
        self._backoff: anyio.CancelScope | None = None
        # Set while the home's storage refuses writes; cleared by the next turn that lands.
        self.storage_down: StorageDown | None = None
        self._told_storage: set[str] = set()

    # -- a kept turn -------------------------------------------------------------------------

    def kept(self, kept: Kept) -> float:
        """Record a kept turn's failed attempt in its outage; return the wait before the next.

        The backoff follows the outage's own attempt count, so a turn cancelled during it does
        not restart the doubling while status still counts on.
        """
        if kept.storage:
            return self.storage_refused(kept.reason)
        return self.model_unreachable(kept.reason)

    def backoff_s(self, attempts: int, ceiling: float | None = None) -> float:
        """The wait after failed attempt `attempts` of a kept turn: doubling, up to a ceiling."""
        top = self.max_s if ceiling is None else min(self.max_s, ceiling)
        return min(top, self.base_s * (2 ** (attempts - 1)))

    def model_unreachable(self, error: str) -> float:
        """Record a failed attempt; return the backoff before the next (doubling per attempt)."""
        now = self.clock.now()
        previous = self.waiting_for_model
        attempts = previous.attempts + 1 if previous is not None else 1
        retry_in_s = self.backoff_s(attempts)
        next_retry = now + timedelta(seconds=retry_in_s)
        if previous is None:
            self.waiting_for_model = WaitingForModel(
                since=now, error=error, attempts=1, last_attempt=now, next_retry=next_retry
            )
            log.warning(
                "trunk waiting for the model; messages stay queued",
                error=error,
                retry_in_s=retry_in_s,
            )
        else:
            self.waiting_for_model = replace(
                previous,
                error=error,
                attempts=previous.attempts + 1,
                last_attempt=now,
                next_retry=next_retry,
            )
        self._tell_all_waiting()
        return retry_in_s

    def storage_refused(self, error: str) -> float:
        """Record a turn stopped by storage; tell every queued listener once; return the wait."""
        now = self.clock.now()
        previous = self.storage_down
        attempts = previous.attempts + 1 if previous is not None else 1
        retry_in_s = self.backoff_s(attempts, ceiling=STORAGE_RETRY_MAX_S)
        self.storage_down = StorageDown(
            since=previous.since if previous is not None else now,
            error=error,
            attempts=attempts,
            next_retry=now + timedelta(seconds=retry_in_s),
        )
        if previous is None:
            log.error(
                "storage refuses writes; new messages are refused, kept ones wait",
                error=error,
                free_bytes=free_bytes(self.home_root),
            )
        for entry in self.inbox.pending():
            if self.listeners.has(entry.id) and entry.id not in self._told_storage:
                self._told_storage.add(entry.id)
                self.listeners.report(
                    TurnFailed(
                        turn_id=entry.id,
                        code=ErrorCode.STORAGE,
                        message=(
                            f"storage refuses writes ({error}) — your message is saved and will "
                            "be answered when space is back"
                        ),
                    )
                )
        return retry_in_s

    # -- an outage over ----------------------------------------------------------------------

    def model_reached(self) -> None:
        if self.waiting_for_model is not None:
            w = self.waiting_for_model
            log.info(
                "the model is reachable again; answering queued messages",
                since=w.since.isoformat(),
                attempts=w.attempts,
            )
        self.waiting_for_model = None
        self._told_waiting.clear()

    def storage_back(self) -> None:
        if self.storage_down is not None:
            log.info(
                "storage accepts writes again; answering kept messages",
                since=self.storage_down.since.isoformat(),
                attempts=self.storage_down.attempts,
            )
        self.storage_down = None
        self._told_storage.clear()

    def forget(self, turn_id: str) -> None:
        """The turn left the queue: it is not told about an outage again."""
        self._told_waiting.discard(turn_id)
        self._told_storage.discard(turn_id)

    # -- new messages ------------------------------------------------------------------------

    def refusal(self) -> str | None:
        """Why a new message cannot be taken now (storage refuses writes), or None."""
        down = self.storage_down
        if down is None:
            return None
        if not self.inbox.pending():
            # No kept message is left to try the disk again (the person cancelled it): let the
            # next message's own write be the test, refused there if the disk is still full.
            self.storage_down = None
            return None
        return (
            f"storage refuses writes since {down.since:%H:%M:%S %Z} ({down.error}); "
            "not taking new messages until space is back — nothing already accepted is lost"
        )

    def tell_if_waiting(self, turn_id: str) -> bool:
        """Tell a just-accepted turn's listener that the model is down, if it is; return whether told.

        Called once `accepted` has gone out, so the listener hears the outage right after it:
        the message stays queued (and on disk) and is answered once the model is back.
        """
        if self.waiting_for_model is None or turn_id in self._told_waiting:
            return False
        if not self.listeners.has(turn_id) or all(e.id != turn_id for e in self.inbox.pending()):
            return False
        self._told_waiting.add(turn_id)
        self.listeners.report(
            TurnFailed(
                turn_id=turn_id,
                code=ErrorCode.MODEL_UNAVAILABLE,
                message=self._waiting_message(turn_id),
            )
        )
        return True

    def _waiting_message(self, turn_id: str) -> str:
        waiting = self.waiting_for_model
        assert waiting is not None
        pending = [e.id for e in self.inbox.pending()]
        ahead = pending.index(turn_id) if turn_id in pending else 0
        place = f"; {ahead} message{'s' if ahead != 1 else ''} ahead of it" if ahead else ""
        if waiting.next_retry <= self.clock.now() + timedelta(seconds=self.base_s):
            retry = "; trying it again now"
        else:
            retry = f"; next try at {waiting.next_retry:%H:%M:%S %Z}"
        return (
            f"the model is not answering ({waiting.error}) since {waiting.since:%H:%M:%S %Z}, "
            f"{waiting.attempts} attempt{'s' if waiting.attempts != 1 else ''} so far — your message is saved "
            f"and will be answered when the model is back{place}{retry}"
        )

    def _tell_all_waiting(self) -> None:
        """Tell every queued turn's listener not yet told about this outage."""
        for entry in self.inbox.pending():
            self.tell_if_waiting(entry.id)

    # -- the wait ----------------------------------------------------------------------------

    def retry_early(self) -> None:
        """Cut the backoff short for a new message: try again now, or `base_s` after the
        last attempt when that was only just now (a burst of messages never hammers the API,
        and a message sent right after a failed try is not left behind the whole backoff)."""
        waiting = self.waiting_for_model
        if waiting is None or self._backoff is None or self._backoff.cancel_called:
            return
        at = max(self.clock.now(), waiting.last_attempt + timedelta(seconds=self.base_s))
        if waiting.next_retry <= at:
            return
        self.waiting_for_model = replace(waiting, next_retry=at)
        self._backoff.cancel()

    async def wait(self, delay: float) -> None:
        """Sleep out the backoff, or less when `retry_early` asks (cancellable)."""
        with anyio.CancelScope() as self._backoff:
            await self.clock.sleep(delay)
        self._backoff = None
        waiting = self.waiting_for_model
        if waiting is not None:
            # Cut short right after an attempt: the rest of `base_s`, then the try.
            left = (waiting.next_retry - self.clock.now()).total_seconds()
            if 0 < left <= self.base_s:
                await self.clock.sleep(left)
