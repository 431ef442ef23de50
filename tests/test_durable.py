"""Durable files: a torn line is skipped on every read and reported once; every write is synced
before it is acknowledged (seen through `durable.fsync_through`: a killed process cannot show
it, the page cache outlives it)."""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path

import pytest
import structlog
from structlog.testing import capture_logs

from daemon import durable
from daemon.agent.inbox import Inbox
from daemon.durable import append_lines, read_jsonl, write_atomic


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


class Syncs:
    """Every fsync of `daemon.durable`, still done for real, with what the file held then."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        held = Path(path).read_bytes() if stat.S_ISREG(os.fstat(fd).st_mode) else b""
        self.seen.append((path, held))

    def of(self, path: Path) -> list[bytes]:
        return [held for where, held in self.seen if where == str(path)]


def test_the_real_fsync_is_the_default() -> None:
    assert durable._fsync is os.fsync


def test_an_append_and_a_replacement_are_synced_with_their_data(tmp_path: Path) -> None:
    syncs = Syncs()
    with durable.fsync_through(syncs):
        append_lines(tmp_path / "log.jsonl", ['{"n": 1}'])
        write_atomic(tmp_path / "state.json", '{"v": 2}')
    assert syncs.of(tmp_path / "log.jsonl") == [b'{"n": 1}\n']
    # The temporary file with its data, then the directory after the rename.
    (tmp, held), (folder, _) = syncs.seen[1:]
    assert held == b'{"v": 2}' and Path(tmp).parent == tmp_path
    assert folder == str(tmp_path)
    assert durable._fsync is os.fsync  # given back after the block


@pytest.mark.anyio
async def test_a_message_is_fsynced_before_the_inbox_acknowledges_it(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.jsonl")
    inbox.load()
    syncs = Syncs()
    with durable.fsync_through(syncs):
        entry = await inbox.put("call the plumber at nine")
        # `put` returned (the gateway sends `accepted` now): the message was synced already.
        synced = syncs.of(inbox.path)
        assert synced, "the inbox acknowledged a message it never synced"
        assert entry.id.encode() in synced[-1] and b"call the plumber at nine" in synced[-1]
        await inbox.put("and the bank")
    assert len(syncs.of(inbox.path)) == 2
