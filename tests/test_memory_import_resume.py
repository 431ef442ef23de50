"""A `memory import` killed with SIGKILL (a real subprocess) resumes without duplicates.

The resumed home must hold exactly what a clean, uninterrupted import of the same file holds:
the same messages once each, the same memories, a vector for each, and transcript files with
every imported message exactly once.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.memory.importer import drop_torn_tail
from tests.harness import REPO, daemon_env

ENV = daemon_env({"REVERIE_EMBEDDER": "hash"})
WORDS = "garden boiler lisbon violin tortoise kestrel bakery marathon harbour lantern orchard canal".split()


def _write(path: Path, sessions: int, per_session: int) -> int:
    rng = random.Random(5)
    with path.open("w") as fh:
        for s in range(sessions):
            for i in range(per_session):
                text = " ".join(rng.choice(WORDS) for _ in range(12)) + f" item {s}-{i}"
                fh.write(
                    json.dumps(
                        {
                            "session": f"s{s:03d}",
                            "id": f"s{s:03d}:{i}",
                            "ts": f"2024-01-{1 + s % 28:02d}T10:{i % 60:02d}:00Z",
                            "role": "user" if i % 2 == 0 else "assistant",
                            "content": text,
                        }
                    )
                    + "\n"
                )
    return sessions * per_session


def _import(home: Path, src: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "memory",
            "import",
            str(src),
            "--home",
            str(home),
            "--json",
        ],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _kill_during(home: Path, src: Path, phase: str) -> list[dict[str, object]]:
    """Start an import, SIGKILL it once `phase` is under way; return the progress it reported."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daemon.cli",
            "memory",
            "import",
            str(src),
            "--home",
            str(home),
            "--json",
        ],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + 240
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if time.monotonic() > deadline:
                break
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            seen.append(event)
            done, total = int(event["done"]), int(event["total"])
            if event["progress"] == phase and 0 < done < total:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, seen[-3:])
    return seen


def _state(home: Path) -> dict[str, object]:
    with sqlite3.connect(home / "reverie.db") as conn:
        messages = conn.execute(
            "SELECT session_id, msg_id FROM messages ORDER BY session_id, seq"
        ).fetchall()
        uids = [r[0] for r in conn.execute("SELECT uid FROM memories ORDER BY uid")]
        missing_vectors = conn.execute(
            "SELECT count(*) FROM memories m LEFT JOIN embeddings e ON e.content_hash = m.content_hash "
            "WHERE e.content_hash IS NULL"
        ).fetchone()[0]
        seqs_ok = conn.execute(
            "SELECT count(*) FROM (SELECT session_id, max(seq) - min(seq) + 1 AS span, count(*) AS n "
            "FROM messages GROUP BY session_id) WHERE span != n"
        ).fetchone()[0]
    on_file: list[str] = []
    for path in sorted((home / "sessions" / "imported").glob("*.jsonl")):
        on_file += [
            json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()
        ]
    return {
        "messages": messages,
        "uids": uids,
        "missing_vectors": missing_vectors,
        "seq_gaps": seqs_ok,
        "on_file": sorted(on_file),
    }


@pytest.mark.parametrize("phase", ["record", "embed"])
def test_killed_import_resumes_without_duplicates(tmp_path: Path, phase: str) -> None:
    src = tmp_path / "history.jsonl"
    total = _write(src, sessions=30, per_session=60)

    clean = tmp_path / "clean"
    r = _import(clean, src)
    assert r.returncode == 0, r.stderr
    expected = _state(clean)
    assert len(expected["messages"]) == total == len(expected["on_file"])  # type: ignore[arg-type]

    home = tmp_path / "home"
    seen = _kill_during(home, src, phase)
    assert seen and seen[-1]["progress"] == phase
    partial = _state(home)
    if phase == "record":
        assert 0 < len(partial["messages"]) < total  # type: ignore[arg-type]
    else:
        assert len(partial["messages"]) == total and partial["missing_vectors"] > 0  # type: ignore[arg-type, operator]

    r = _import(home, src)
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)
    assert counts["messages"] + counts["already_present"] == total
    assert counts["messages"] == total - len(partial["messages"])  # type: ignore[arg-type]
    resumed = _state(home)
    assert resumed == expected
    assert len(set(resumed["on_file"])) == total  # type: ignore[arg-type]

    # And once more: nothing new, nothing duplicated.
    again = json.loads(_import(home, src).stdout)
    assert again["messages"] == 0 and again["already_present"] == total and again["chunks"] == 0
    assert _state(home) == expected


def test_a_torn_last_line_is_cut_and_its_message_imported_again(tmp_path: Path) -> None:
    src = tmp_path / "conv.jsonl"
    _write(src, sessions=1, per_session=6)
    home = tmp_path / "home"
    assert _import(home, src).returncode == 0
    target = home / "sessions" / "imported" / "s000.jsonl"
    lines = target.read_text().splitlines(keepends=True)
    # As a kill mid-write would leave it: the last message half on disk, and its row missing.
    target.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    with sqlite3.connect(home / "reverie.db") as conn:
        conn.execute("DELETE FROM messages WHERE msg_id = 's000:5'")
    r = _import(home, src)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["messages"] == 1
    assert [json.loads(line)["id"] for line in target.read_text().splitlines()] == [
        f"s000:{i}" for i in range(6)
    ]
    assert drop_torn_tail(target) == 0
