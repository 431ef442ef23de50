"""A daemon starts with what its configuration uses (issue 36).

A real daemon (`reverie run` subprocess, real home, real socket) is started with
`PYTHONPROFILEIMPORTTIME=1` on a home configured with the offline model for every role, no
MCP servers, the web console off and no embedder; once it answers `hello` and has sat idle a
moment, the modules it loaded are held to a list it must not load (what only a fetch, a
listing, the console, an MCP server or the Anthropic API needs) and to a count budget, so a
heavy import creeping back into the start fails here.
"""

from __future__ import annotations

import time

import pytest

from tests.harness import OFFLINE_ROLES, DaemonProcess, daemon_env

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
)
# 853 measured at the change (1087 before it); Python's own start is ~40, structlog with the
# rich and twisted integrations it finds ~150, numpy ~90, pydantic ~45, the daemon's own ~260.
MODULE_BUDGET = 900


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NEVER))


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    home = tmp_path_factory.mktemp("start") / "home"
    home.mkdir()
    (home / "reverie.toml").write_text(CONFIG)
    d = DaemonProcess(home, daemon_env({"PYTHONPROFILEIMPORTTIME": "1"}))
    d.start(timeout=60)
    try:
        time.sleep(1.0)  # what the start-up tasks import just after READY counts too
        assert d.proc is not None and d.proc.poll() is None, d.logs()
        assert d.log_path is not None
        lines = d.log_path.read_text(errors="replace").splitlines()
    finally:
        d.stop()
    modules = {ln.rsplit("|", 1)[-1].strip() for ln in lines if ln.startswith("import time:")}
    modules.discard("imported package")  # the header line
    assert "daemon.app" in modules, "no import profile in the daemon's output"
    return modules


def test_an_idle_daemon_loads_nothing_its_configuration_does_not_use(started: set[str]) -> None:
    assert not _heavy(started), _heavy(started)


def test_an_idle_daemon_stays_within_its_module_budget(started: set[str]) -> None:
    assert len(started) <= MODULE_BUDGET, f"{len(started)} modules: {sorted(started)}"
