"""Logging: structlog loads at the first line logged, without the integrations it would pull in."""

from __future__ import annotations

import json

from tests.harness import run_python

_LOG_A_LINE = """
import json, sys
from daemon.log import bind_contextvars, configure, get_logger
configure("info", "json")
before = "structlog" in sys.modules
bind_contextvars(turn_id="t-1")
get_logger("test").info("a line", n=1)
try:
    raise ValueError("boom")
except ValueError:
    get_logger("test").error("it failed", exc_info=True)
import rich  # hidden only while structlog loaded: importable as usual afterwards
print(json.dumps({"before": before, "loaded": sorted(m for m in ("twisted", "structlog")
                  if m in sys.modules)}), file=sys.stderr)
"""


def test_structlog_loads_at_the_first_line_without_rich_or_twisted_and_logs_json() -> None:
    out = run_python("-c", _LOG_A_LINE)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stderr.strip().splitlines()[-1])
    # Not at `configure`; at the first line; and neither integration with it (~170 modules,
    # ~0.1 CPU-seconds): twisted never, rich only when something else imports it.
    assert seen == {"before": False, "loaded": ["structlog"]}, seen
    lines = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert lines[0]["event"] == "a line" and lines[0]["turn_id"] == "t-1", lines
    assert lines[0]["level"] == "info" and lines[0]["n"] == 1
    assert lines[1]["event"] == "it failed" and "ValueError: boom" in lines[1]["exception"]


_CONSOLE = """
from daemon.log import configure, get_logger
configure("info", "console")
try:
    raise ValueError("boom")
except ValueError:
    get_logger("test").error("it failed", exc_info=True)
"""


def test_the_console_format_prints_a_plain_traceback() -> None:
    out = run_python("-c", _CONSOLE)
    assert out.returncode == 0, out.stderr
    assert "it failed" in out.stdout and "ValueError: boom" in out.stdout, out.stdout
    assert "Traceback (most recent call last)" in out.stdout, out.stdout
