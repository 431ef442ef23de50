"""Retries shared by the network providers: the loop, full-jitter backoff, `retry-after`."""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from email.utils import parsedate_to_datetime
from time import time
from typing import Any, TypeVar

import anyio

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.models.base import ModelError, ModelUnavailable

log = get_logger("models")
T = TypeVar("T")

# A server asking for a longer pause than this is treated as down rather than waited for.
RETRY_AFTER_CEILING_S = 300.0


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` (seconds or a date)."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time())
    except (TypeError, ValueError):
        return None


class Backoff:
    """Waits between attempts: the server's `retry-after` when given, else full jitter.

    Full jitter (a uniform draw from zero to an exponentially growing ceiling) spreads
    retries from many clients so they do not hit a recovering server in lockstep.
    """

    def __init__(self, base_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self.base_s = base_s
        self.max_s = max_s
        self._rng = rng or random.Random()

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None:
            return min(retry_after, RETRY_AFTER_CEILING_S)
        ceiling = min(self.max_s, self.base_s * 2 ** (attempt - 1))
        return self._rng.uniform(0, ceiling)


class AttemptFailed(ReverieError):
    """One failed attempt, classified: may it be retried, and did the server say when."""

    def __init__(
        self,
        *,
        reason: str,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


async def retrying_stream(
    attempt: Callable[[], AsyncGenerator[T, None]],
    *,
    attempts: int,
    classify: Callable[[Exception], AttemptFailed | None],
    delay: Callable[[int, float | None], float],
    name: str,
    **log_fields: Any,
) -> AsyncGenerator[T, None]:
    """Yield one attempt's events, retrying failures that happen before anything was yielded.

    `classify` turns an exception into an `AttemptFailed`; one it does not know (None) is an
    unreadable response, retried like an outage.
    Raises `ModelUnavailable` after `attempts` failed, `ModelError(retryable=True)` when a
    stream broke after events reached the caller (restarting would repeat them), and
    `ModelError(retryable=False)` for rejected requests. Cancellation closes the attempt's
    stream and propagates.
    """
    for number in range(1, attempts + 1):
        delivered = False
        try:
            # aclosing: a caller that stops early must not leave the HTTP stream to the GC.
            async with aclosing(attempt()) as events:
                async for event in events:
                    delivered = True
                    yield event
            return
        except Exception as err:
            failure = err if isinstance(err, AttemptFailed) else classify(err)
            if failure is None:
                # Not a failure the provider knows (an event that is not JSON, a response the
                # SDK cannot read): still this attempt's failure, never the caller's crash.
                log.warning(
                    "model stream could not be read",
                    provider=name,
                    error=f"{type(err).__name__}: {err}",
                    exc_info=err,
                    **log_fields,
                )
                failure = AttemptFailed(
                    reason=f"unreadable response ({type(err).__name__}: {err})", retryable=True
                )
        if not failure.retryable:
            raise ModelError(
                f"{name} rejected the request: {failure.reason}", status=failure.status
            )
        if delivered:
            raise ModelError(
                f"{name} stream broke after part of the reply was delivered: {failure.reason}",
                retryable=True,
                status=failure.status,
            )
        if number == attempts:
            raise ModelUnavailable(
                f"{name} unavailable after {attempts} attempt{'s' if attempts > 1 else ''}: {failure.reason}",
                status=failure.status,
            )
        wait = delay(number, failure.retry_after)
        log.warning(
            "model call failed; retrying",
            provider=name,
            attempt=number,
            of=attempts,
            reason=failure.reason,
            wait_s=round(wait, 3),
            **log_fields,
        )
        await anyio.sleep(wait)
