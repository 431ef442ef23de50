"""Structured logging: one processor chain, contextvars for ids, JSON when not a terminal.

Every line carries what is bound in the current context (`session_id`, `turn_id`, `job`),
so a turn or a job can be followed through journald with one filter.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, bound_contextvars, clear_contextvars

__all__ = ["bind_contextvars", "bound_contextvars", "clear_contextvars", "configure", "get_logger"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class _SysStream:
    """Write to `sys.<name>` as it is at write time (it may be swapped, e.g. by test capture)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, text: str) -> int:
        return int(getattr(sys, self.name).write(text))

    def flush(self) -> None:
        getattr(sys, self.name).flush()

    def isatty(self) -> bool:
        stream = getattr(sys, self.name)
        return bool(hasattr(stream, "isatty") and stream.isatty())


def configure(
    level: str = "info", fmt: str = "auto", stream: Any = None, *, to: str = "stdout"
) -> None:
    """Configure structlog (and stdlib logging beneath it) for the whole process.

    Without `stream`, lines go to `sys.stdout` (or `sys.stderr` with `to="stderr"`),
    looked up at each write.
    """
    out = stream if stream is not None else _SysStream(to)
    use_json = fmt == "json" or (fmt == "auto" and not (hasattr(out, "isatty") and out.isatty()))
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # Third-party libraries log through stdlib; keep them quiet unless debugging.
    root = logging.getLogger()
    root.setLevel(logging.WARNING if level != "debug" else logging.DEBUG)
    if not any(getattr(h, "_reverie", False) for h in root.handlers):
        handler = logging.StreamHandler(_SysStream("stderr"))  # type: ignore[arg-type]
        handler._reverie = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    for noisy in ("httpx", "httpcore", "apscheduler", "watchfiles", "anthropic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name) if name else structlog.get_logger()
