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

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", fmt: str = "auto", stream: Any = None) -> None:
    """Configure structlog (and stdlib logging beneath it) for the whole process."""
    out = stream if stream is not None else sys.stdout
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
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # Third-party libraries log through stdlib; keep them quiet unless debugging.
    logging.basicConfig(level=logging.WARNING if level != "debug" else logging.DEBUG, stream=sys.stderr)
    for noisy in ("httpx", "httpcore", "apscheduler", "watchfiles", "anthropic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name) if name else structlog.get_logger()
