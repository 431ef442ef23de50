"""Memory commands through the running daemon and directly: same output, same exit codes.

Real processes throughout: the CLI as a subprocess, the daemon as a subprocess on a real Unix
socket, the same home for both paths.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonProcess, daemon_env, run_python
from tests.memory_support import DIALOGUE_LINES, write_jsonl

LINES = [
    *DIALOGUE_LINES,
    {
        "session": "conv-2",
        "id": "D2:2",
        "ts": "2023-06-10T10:01:00Z",
        "role": "assistant",
        "speaker": "Caroline",
        "content": "A sunrise! Did the kids paint too, or did they go swimming in the lake?",
    },
    {
        "session": "conv-3",
        "id": "D3:1",
        "ts": "2023-07-01T09:00:00Z",
        "role": "user",
        "speaker": "Caroline",
        "content": "My sister Ada moved to Lisbon in July and started a job as a pharmacist.",
    },
]
MORE = [
    {
        "session": "conv-4",
        "id": "D4:1",
        "ts": "2023-08-02T09:00:00Z",
        "role": "user",
        "speaker": "Melanie",
        "content": "We adopted a beagle called Biscuit from the shelter on Tuesday.",
    },
]
QUERIES = [
    "When did Caroline go to the support group?",
    "what did Melanie paint",
    "Where does Ada live now?",
    "beagle",
    "nothing like this is in memory zebra quantum",
]
ENV = {"REVERIE_EMBEDDER": "hash"}


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_python(*args, env=env or daemon_env(ENV), timeout=120)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _python("-m", "daemon.cli", *args, env=env)


_write = write_jsonl


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    d = DaemonProcess(home=tmp_path / "home", env=daemon_env(ENV))
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.proc.kill()
        d.wait(10)


def _searches(
    home: Path, batch: Path, capsys: pytest.CaptureFixture[str]
) -> list[tuple[int, str, str]]:
    """Run the searches through the CLI's entry point in this process (the daemon, if any, is real)."""
    from daemon.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--home", str(home)])
        out = capsys.readouterr()
        return code, out.out, out.err

    runs = []
    # Every query in one batch (JSON); three of them alone, as text, lexical and filtered.
    for q in QUERIES[:3]:
        for extra in (
            (),
            ("--mode", "lexical", "--json"),
            ("--kind", "chunk", "--k", "2", "--json"),
        ):
            runs.append(run("memory", "search", q, *extra))
    runs.append(run("memory", "search", "--batch", str(batch), "--json"))
    for bad in (("memory", "search", "x", "--k", "0"), ("memory", "search"), ("recall", "  ")):
        runs.append(run(*bad))
    return runs


def test_daemon_and_direct_paths_give_the_same_hits(
    tmp_path: Path,
    daemon: DaemonProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REVERIE_EMBEDDER", "hash")
    home = daemon.home
    src = _write(tmp_path / "conv.jsonl", LINES)
    batch = tmp_path / "queries.txt"
    batch.write_text("\n".join(QUERIES) + "\n")
    r = _cli("memory", "import", str(src), "--home", str(home), "--json")
    assert r.returncode == 0, r.stderr
    r = _cli("remember", "Melanie's favourite colour is teal", "--home", str(home), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "stored", r.stderr

    direct = _searches(home, batch, capsys)
    assert any("D3:1" in out for _, out, _ in direct)
    assert direct[-3][0] == 1 and direct[-3][2].strip() == "reverie: --k must be a positive number"

    daemon.start()
    from daemon.cli import build_parser
    from daemon.cli.forward import forward

    line = ["memory", "search", "sunrise", "--home", str(home)]
    assert (
        forward(build_parser(line).parse_args(line), out=io.StringIO()) == 0
    )  # the daemon answers
    forwarded = _searches(home, batch, capsys)
    for (d_code, d_out, d_err), (f_code, f_out, f_err) in zip(direct, forwarded, strict=True):
        assert (f_code, f_out) == (d_code, d_out)
        assert f_err.strip() == d_err.strip()

    # Writes through the daemon: an import and a fact, then an import of a bad file.
    more = _write(tmp_path / "more.jsonl", MORE)
    r = _cli("memory", "import", str(more), "--home", str(home), "--json", "--summarise")
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)
    assert (
        counts["messages"] == 1 and counts["sessions"] == 1 and counts["embeddings"] == "hash-256"
    )
    # Summarised by the daemon's own summariser (the offline model here).
    assert counts["summaries"] == 1
    assert len(list((home / "memory" / "sessions").glob("session-*.md"))) == 1
    progress = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    assert {p["progress"] for p in progress} >= {"record", "embed", "summarise"}
    assert progress[-1]["done"] == progress[-1]["total"]
    assert any(e.get("event") == "memory import done" for e in daemon.log_events())

    r = _cli("remember", "--correct", "fact:999", "no such fact", "--home", str(home))
    bad_fact = (r.returncode, r.stderr.strip())
    assert bad_fact[0] == 1 and bad_fact[1].startswith("reverie: ")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(MORE[0]) + "\n{not json\n")
    r = _cli("memory", "import", str(broken), "--home", str(home))
    bad_import = (r.returncode, r.stderr.strip())
    assert bad_import[0] == 1 and "import stopped, nothing written" in bad_import[1]

    r = _cli("recall", "Ada Lisbon", "--home", str(home), "--json")
    assert r.returncode == 0, r.stderr
    recalled = json.loads(r.stdout)
    assert "Lisbon" in recalled["text"]
    warm_after = [
        (_cli("memory", "search", q, "--home", str(home), "--json").stdout)
        for q in ("beagle", "teal colour")
    ]
    assert daemon.stop() == 0

    # The same home with the daemon stopped: the direct path agrees, also on refusals.
    assert [
        (_cli("memory", "search", q, "--home", str(home), "--json").stdout)
        for q in ("beagle", "teal colour")
    ] == warm_after
    assert "D4:1" in warm_after[0] and "teal" in warm_after[1]
    r = _cli("remember", "--correct", "fact:999", "no such fact", "--home", str(home))
    assert (r.returncode, r.stderr.strip()) == bad_fact
    r = _cli("memory", "import", str(broken), "--home", str(home))
    assert (r.returncode, r.stderr.strip()) == bad_import
    r = _cli("recall", "Ada Lisbon", "--home", str(home), "--json")
    assert json.loads(r.stdout) == recalled


def test_forwarding_imports_nothing_heavy(tmp_path: Path, daemon: DaemonProcess) -> None:
    home = daemon.home
    src = _write(tmp_path / "conv.jsonl", LINES)
    assert _cli("memory", "import", str(src), "--home", str(home)).returncode == 0
    daemon.start()
    probe = (
        "import sys\n"
        "from daemon.cli import main\n"
        f"code = main(['memory', 'search', 'sunrise lake', '--home', {str(home)!r}, '--json',"
        " '--kind', 'chunk', '--k', '5'])\n"
        # argparse and json are the parser and the wire (~12 ms, worth one parser): no more.
        "heavy = sorted(m for m in ('numpy', 'anyio', 'pydantic', 'structlog', 'daemon.settings',"
        " 'daemon.memory.index', 'daemon.cli.support', 'daemon.cli.memory_direct', 'typing',"
        # The one client connection without its event-loop side or the server's parser.
        " 'daemon.chat.client', 'daemon.chat.protocol', 'dataclasses')"
        " if m in sys.modules)\n"
        "print('HEAVY', heavy, 'CODE', code, file=sys.stderr)\n"
    )
    r = _python("-c", probe)
    assert "HEAVY [] CODE 0" in r.stderr, r.stderr
    assert "D2:1" in r.stdout
    # The installed `reverie` launcher (scripts/setup.sh installs a pip whose launcher does
    # not import `re`) adds nothing heavy either.
    launcher = Path(sys.executable).with_name("reverie")
    assert launcher.exists(), "scripts/setup.sh installs the `reverie` launcher"
    r = _python(
        "-X",
        "importtime",
        str(launcher),
        "memory",
        "search",
        "sunrise",
        "--home",
        str(home),
        "--json",
    )
    assert r.returncode == 0 and "D2:1" in r.stdout, r.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines()}
    assert not imported & {"numpy", "anyio", "pydantic", "daemon.settings"}, sorted(imported)
    # `reverie status` is asked of the running daemon the same way (a cold status at 0.03
    # CPU-seconds, not the 0.6 of loading the settings, the store and the sleep cycle).
    for form in ([], ["--json"]):
        status_probe = probe.replace(
            "['memory', 'search', 'sunrise lake', '--home', "
            f"{str(home)!r}, '--json', '--kind', 'chunk', '--k', '5']",
            f"['status', '--home', {str(home)!r}, *{form!r}]",
        )
        r = _python("-c", status_probe)
        assert "HEAVY [] CODE 0" in r.stderr, r.stderr
        if form:
            assert json.loads(r.stdout)["running"] is True
        else:
            assert r.stdout.startswith("state:        awake"), r.stdout
    assert daemon.stop() == 0
    # With no daemon the same call takes the direct path (and imports what it needs).
    r = _python("-c", probe)
    assert "CODE 0" in r.stderr and "'numpy'" in r.stderr and "D2:1" in r.stdout, r.stderr


def test_reindex_makes_no_model_call_and_writes_no_summary(tmp_path: Path) -> None:
    from tests.fakes.anthropic_server import FakeAnthropic
    from tests.harness import Client

    home = tmp_path / "home"
    src = _write(tmp_path / "conv.jsonl", LINES)
    with FakeAnthropic() as fake:
        env = daemon_env({**ENV, "ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url})
        assert _cli("memory", "import", str(src), "--home", str(home), env=env).returncode == 0
        # A trunk session the summariser never saw: the daemon is killed before shutdown.
        d = DaemonProcess(home=home, env=env).start()
        try:
            fake.enqueue("Noted: the garden shed needs a new roof.")
            with Client(d.socket_path) as c:
                c.hello()
                _, frames = c.chat("the garden shed needs a new roof")
                assert frames[-1]["type"] == "done", frames
        finally:
            d.kill()
        assert (
            _cli(
                "remember", "the boiler is serviced every March", "--home", str(home), env=env
            ).returncode
            == 0
        )
        before = _cli(
            "memory", "search", "Ada Lisbon", "--home", str(home), "--json", env=env
        ).stdout
        calls = len(fake.requests)
        fake.enqueue(*["a summary the test never wants written"] * 4)
        r = _cli("memory", "reindex", "--home", str(home), env=env)
        assert r.returncode == 0, r.stderr
        assert "facts=1" in r.stdout and "sessions=4" in r.stdout, r.stdout
        assert len(fake.requests) == calls
        assert fake.pending == 4
    assert list((home / "memory" / "sessions").glob("*.md")) == []
    after = _cli("memory", "search", "Ada Lisbon", "--home", str(home), "--json", env=env).stdout
    assert json.loads(after)[0]["message_ids"] == json.loads(before)[0]["message_ids"] == ["D3:1"]
    shed = _cli(
        "memory", "search", "garden shed roof", "--home", str(home), "--json", env=env
    ).stdout
    assert "shed" in shed
    facts = _cli(
        "memory",
        "search",
        "boiler serviced",
        "--home",
        str(home),
        "--json",
        "--kind",
        "fact",
        env=env,
    ).stdout
    assert "March" in facts


def test_forwarding_finds_a_configured_socket(tmp_path: Path) -> None:
    from daemon.cli.locate import socket_path

    home = tmp_path / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(
        "# socket = 'commented.sock'\n[chat]\nmax_frame_bytes = 1000\n"
    )
    assert socket_path(str(home), None) == str(home / "run" / "reverie.sock")
    (home / "reverie.toml").write_text("[chat]\nsocket = 'elsewhere/r.sock'\n")
    assert socket_path(str(home), None) == str(home / "elsewhere" / "r.sock")
    extra = tmp_path / "extra.toml"
    extra.write_text("chat = { socket = '/tmp/abs.sock' }\n")
    assert socket_path(str(home), str(extra)) == "/tmp/abs.sock"
    extra.write_text("[chat\nsocket = broken")
    assert socket_path(str(home), str(extra)) is None  # the full CLI reports the bad file


def test_a_database_rebuilt_from_the_files_names_every_chunk_as_before(tmp_path: Path) -> None:
    import sqlite3

    from tests.harness import Client

    home = tmp_path / "home"
    env = daemon_env(ENV)
    d = DaemonProcess(home=home, env=env).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            for text in ("the kiln is named Bartholomew", "the glaze firing is on Friday"):
                _, frames = c.chat(text)
                assert frames[-1]["type"] == "done", frames
    finally:
        assert d.stop() == 0

    def chunks() -> list[tuple[str, str]]:
        with sqlite3.connect(home / "reverie.db") as conn:
            rows = conn.execute(
                "SELECT uid, text FROM memories WHERE kind = 'chunk' ORDER BY uid"
            ).fetchall()
        return [(str(u), str(t)) for u, t in rows]

    before = chunks()
    assert any("Bartholomew" in t for _, t in before)
    for f in home.glob("reverie.db*"):
        f.unlink()
    r = _cli("memory", "reindex", "--home", str(home), env=env)
    assert r.returncode == 0, r.stderr
    after = dict(chunks())
    # Every message chunk keeps its id and text (windows may have grown: the rebuild also takes
    # in a last reply the stopping daemon had not chunked yet).
    singles = [(u, t) for u, t in before if not u.endswith("-w")]
    assert singles and all(after.get(u) == t for u, t in singles), (singles, after)
    # The daemon continues the same trunk session from its transcript.
    live = singles[0][0].split(":")[1]
    d = DaemonProcess(home=home, env=env).start()
    try:
        with Client(d.socket_path) as c:
            assert c.hello()["session_id"] == live
    finally:
        assert d.stop() == 0
