"""Named fault points: moments a test can stop the daemon at, to see what a crash there leaves.

Production code marks such a moment with `fault_point(name)`; it does nothing unless a handler
was installed for that name with `install`. Only a test harness installs one — the crash
tests start the daemon through `tests/faults.py`, which installs the handlers and then runs
`reverie` as usual. No environment variable or setting reaches them, so a daemon in service
cannot be told to crash.
"""

from __future__ import annotations

from collections.abc import Callable

# Every point production code marks; installing any other name is an error, so a test whose
# point was renamed or removed fails instead of passing without its crash.
POINTS = {
    "schedule.fire_committed": "a firing's record and notice are committed; nobody told yet",
}

_handlers: dict[str, Callable[[], None]] = {}


def install(name: str, handler: Callable[[], None]) -> None:
    """Call `handler` whenever the code passes the point `name` (for a test's crash)."""
    if name not in POINTS:
        raise ValueError(f"no fault point {name!r} (there are: {', '.join(sorted(POINTS))})")
    _handlers[name] = handler


def fault_point(name: str) -> None:
    """Mark the moment `name`: run its handler, if a test installed one."""
    handler = _handlers.get(name)
    if handler is not None:
        handler()
