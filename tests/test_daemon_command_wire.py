"""Commands over the real daemon's socket: argument types are checked, files are passed, not named."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Client, DaemonProcess, daemon_env
from tests.memory_support import DIALOGUE_LINES, write_jsonl


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env({"REVERIE_EMBEDDER": "hash"}))
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _import_passed(c: Client, path: Path, frame_id: str, **args: Any) -> list[dict[str, Any]]:
    """Send `memory_import` with `path` passed open, then remove the path; return its frames."""
    fd = os.open(path, os.O_RDONLY)
    path.unlink()
    frame = {
        "type": "command",
        "name": "memory_import",
        "id": frame_id,
        "files": 1,
        "args": {"name": path.name, **args},
    }
    try:
        socket.send_fds(c.sock, [json.dumps(frame).encode() + b"\n"], [fd])
    finally:
        os.close(fd)
    return c.recv_until(lambda f: f.get("id") == frame_id and f["type"] in ("result", "error"))


def _facts(home: Path) -> list[str]:
    log = home / "memory" / "facts.jsonl"
    if not log.exists():
        return []
    return [
        str(json.loads(line).get("text")) for line in log.read_text().splitlines() if line.strip()
    ]


def test_memory_import_reads_the_passed_file_and_never_opens_a_named_path(
    tmp_path: Path, daemon: DaemonProcess
) -> None:
    daemon.start()
    # Stands for a file only the daemon's user may read (as /etc/shadow is).
    private = tmp_path / "shadow"
    private.write_text("root:$6$salt$hash:19000:0:99999:7:::\n")
    with Client(daemon.socket_path, timeout=60) as c:
        c.hello()
        refused = c.command("memory_import", {"path": str(private)})
        assert (refused["type"], refused["code"]) == ("error", "bad_args")
        assert "does not open paths" in refused["message"]
        # Nothing about the file's content leaks back.
        assert "JSON" not in refused["message"] and "line 1" not in refused["message"]

        # The file passed open is imported even though no path leads to it any more.
        frames = _import_passed(c, write_jsonl(tmp_path / "talk.jsonl", DIALOGUE_LINES), "imp")
        done = frames[-1]
        assert done["type"] == "result", done
        assert done["data"]["messages"] == len(DIALOGUE_LINES)
        assert any(f["type"] == "progress" for f in frames)

        # A bad passed file is reported by the name the client gave it, and writes nothing.
        broken = tmp_path / "broken.jsonl"
        broken.write_text("this is not json\n")
        err = _import_passed(c, broken, "bad")[-1]
        assert (err["type"], err["code"]) == ("error", "bad_args")
        assert "nothing written" in err["message"] and "broken.jsonl line 1" in err["message"]
    # The daemon's private copies of the passed files are gone.
    assert not list((daemon.home / "cache").glob("import-*"))
    daemon.stop()


def test_a_wrongly_typed_argument_stores_nothing(daemon: DaemonProcess) -> None:
    daemon.start()
    with Client(daemon.socket_path, timeout=30) as c:
        c.hello()
        refused = c.command("remember", {"text": 7})
        assert (refused["type"], refused["code"]) == ("error", "bad_args")
        assert refused["message"] == "remember: 'text' must be a string, got a number"
        assert c.command("recall", {"query": ["x"]})["code"] == "bad_args"
        stored = c.command("remember", {"text": "the garden gate sticks"})
        assert stored["type"] == "result", stored
    assert _facts(daemon.home) == ["the garden gate sticks"]
    daemon.stop()
