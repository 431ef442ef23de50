"""Structured logging: one processor chain, contextvars for ids, JSON when not a terminal.

Every line carries what is bound in the current context (`session_id`, `turn_id`, `job`),
so a turn or a job can be followed through journald with one filter.

structlog is imported at the first line logged (or at `configure`), not with this module, so
a cold command that logs nothing (`reverie status` with the daemon down) does not pay for it;
and it is imported without its rich and twisted integrations (`_import_structlog`), which it
loads whenever they are installed (rich comes with typer, twisted with the Matrix test
server) and which tripled its cost (~0.15 CPU-seconds and ~170 modules, against ~0.05).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["bind_contextvars", "bound_contextvars", "clear_contextvars", "configure", "get_logger"]

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}  # logging.DEBUG …


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
    looked up at each write. structlog's part waits for structlog's first use when it is not
    imported yet (a command that logs nothing never imports it); stdlib logging's is set now.
    """
    import logging

    global _pending
    _pending = (level, fmt, stream, to)
    if "structlog" in sys.modules:
        _structlog()
    # Third-party libraries log through stdlib; keep them quiet unless debugging.
    root = logging.getLogger()
    root.setLevel(logging.WARNING if level != "debug" else logging.DEBUG)
    if not any(getattr(h, "_reverie", False) for h in root.handlers):
        handler = logging.StreamHandler(_SysStream("stderr"))  # type: ignore[arg-type]
        handler._reverie = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    for noisy in ("httpx", "httpcore", "apscheduler", "watchfiles", "anthropic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# The last `configure` call's arguments, applied once structlog is imported.
_pending: tuple[str, str, Any, str] | None = None


# Imported by structlog when present, used by nothing here: rich formats exceptions in its
# console renderer (`_structlog` names the plain formatter), twisted is a logging integration.
_NOT_FOR_STRUCTLOG = ("rich", "twisted")


def _import_structlog() -> Any:
    """`import structlog` with rich and twisted hidden from it while it loads.

    A `None` in `sys.modules` makes an import of that name fail, so structlog's optional
    `try: import rich` falls back; the entries are removed right after, so anything else
    (typer's help) imports rich as usual. Already imported, they are left as they are.
    """
    if "structlog" in sys.modules:
        return sys.modules["structlog"]
    hidden = [name for name in _NOT_FOR_STRUCTLOG if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        import structlog
    finally:
        for name in hidden:
            if sys.modules.get(name, "") is None:
                del sys.modules[name]
    return structlog


def _structlog() -> Any:
    """structlog, imported and configured as the last `configure` call asked."""
    structlog = _import_structlog()

    global _pending
    if _pending is None:
        return structlog
    level, fmt, stream, to = _pending
    _pending = None
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
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=out),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    return structlog


class _Logger:
    """A module's logger, bound to structlog's at its first use."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._real: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._real is None:
            structlog = _structlog()
            self._real = structlog.get_logger(self._name) if self._name else structlog.get_logger()
        return getattr(self._real, attr)


def get_logger(name: str | None = None) -> Any:
    return _Logger(name)


def bind_contextvars(**values: Any) -> Any:
    """Bind `values` to every line logged in the current context (structlog's)."""
    return _structlog().contextvars.bind_contextvars(**values)


def bound_contextvars(**values: Any) -> Any:
    """A context manager binding `values` to the lines logged inside it (structlog's)."""
    return _structlog().contextvars.bound_contextvars(**values)


def clear_contextvars() -> None:
    """Forget every value bound to the current context (structlog's)."""
    _structlog().contextvars.clear_contextvars()
