"""Durable files: a torn line is skipped on every read and reported once."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import structlog
from structlog.testing import capture_logs

from daemon.durable import append_lines, read_jsonl


def test_a_torn_line_is_skipped_every_time_and_reported_once(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_lines(path, [json.dumps({"n": 1})])
    with path.open("a") as fh:
        fh.write('{"n": 2, "half')  # a crash mid-append
    append_lines(path, [json.dumps({"n": 3})])  # starts on a fresh line
    before = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logs:
            reads = [read_jsonl(path) for _ in range(5)]
    finally:
        structlog.configure(**before)
    assert all(r == [{"n": 1}, {"n": 3}] for r in reads)
    warned = [e for e in logs if e["event"] == "skipping an unreadable line"]
    assert len(warned) == 1 and warned[0]["line"] == 2
