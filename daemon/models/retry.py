"""Retry timing shared by the network providers: full-jitter backoff and `retry-after`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from time import time

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
