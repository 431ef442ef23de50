"""A cold command imports what it runs: `reverie status` with the daemon down (issue 36).

The status of a stopped daemon is read from a real SQLite store in a `reverie` subprocess
under `python -X importtime`; the modules it loaded are counted against a budget and a list
of modules it must never load (a heavy import creeping back fails here). The settings it
reads without pydantic (`StatusSettings.read`) are held to what `daemon.settings` validates.
"""

from __future__ import annotations

import asyncio
import json
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from daemon.clock import next_time_of_day
from daemon.settings import Settings
from daemon.status_offline import CHECKS, StatusSettings
from daemon.store.db import Database
from daemon.store.job_state import JobState, JobStateRepo
from daemon.store.kv import KvRepo
from daemon.store.sleep_cycles import SleepCyclesRepo
from tests.harness import daemon_env, run_python

# Measured at 247-260 on the idle machine (Python's own start is ~40 of them); pydantic alone
# brings ~100 more, the sleep cycle with numpy ~300.
MODULE_BUDGET = 300
NEVER = (
    "numpy",
    "httpx",
    "mcp",
    "anthropic",
    "pydantic",
    "structlog",
    "apscheduler",
    "daemon.settings",
    "daemon.web",
    "daemon.sleep.cycle",
    "daemon.models.ledger",
    "daemon.context.handover",
    "daemon.memory.index",
)
WHEN = datetime(2026, 11, 27, 3, 41, tzinfo=UTC)


async def _fill(db_file: Path) -> None:
    """A store as a daemon leaves it: its trunk session, a job's run, a finished sleep."""
    async with await Database.open(db_file) as db:
        await KvRepo(db).put_json("trunk_session", "trunk-20261127-cold", at=WHEN)
        await JobStateRepo(db).save(
            JobState(
                job="heartbeat",
                last_run=WHEN.isoformat(),
                last_status="ok",
                last_result="2 entries",
                next_run=(WHEN + timedelta(minutes=20)).isoformat(),
                runs=7,
            ),
            at=WHEN.isoformat(),
        )
        cycles = SleepCyclesRepo(db)
        await cycles.begin(cycle_id="sleep-cold", reason="nightly", session_id="t-1", at=WHEN)
        await cycles.finish(
            "sleep-cold",
            at=WHEN + timedelta(minutes=3),
            status="done",
            new_session_id="trunk-20261127-cold",
            woke_early=False,
            deferred=[],
        )


@pytest.fixture(scope="module")
def stopped_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cold") / "home"
    home.mkdir()
    asyncio.run(_fill(home / "reverie.db"))
    return home


def _cold_status(home: Path, *flags: str) -> tuple[Any, set[str], str]:
    """`reverie status` in a fresh interpreter: its output, the modules it loaded, stderr."""
    r = run_python(
        "-X", "importtime", "-m", "daemon.cli", "status", "--home", str(home), *flags,
        env=daemon_env(), timeout=120,
    )  # fmt: skip
    lines = r.stderr.splitlines()
    modules = {ln.rsplit("|", 1)[-1].strip() for ln in lines if ln.startswith("import time:")}
    modules.discard("imported package")  # the header line
    rest = "\n".join(ln for ln in lines if not ln.startswith("import time:"))
    assert r.returncode == 0, rest
    return (json.loads(r.stdout) if "--json" in flags else r.stdout), modules, rest


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NEVER))


def test_a_stopped_daemons_status_loads_only_what_it_prints(stopped_home: Path) -> None:
    data, modules, _ = _cold_status(stopped_home, "--json")
    assert data["running"] is False and data["state"] == "stopped"
    assert data["trunk"]["session_id"] == "trunk-20261127-cold"
    assert data["last_heartbeat"] == WHEN.isoformat()
    assert data["sleep"]["last"]["cycle_id"] == "sleep-cold"
    assert data["spend"]["cap_usd"] == 10.0 and data["context"]["window_tokens"] == 200_000
    assert data["next_sleep"] is not None
    assert not _heavy(modules), _heavy(modules)
    assert len(modules) <= MODULE_BUDGET, f"{len(modules)} modules: {sorted(modules)}"

    text, modules, _ = _cold_status(stopped_home)
    assert text.startswith("state:        stopped (daemon not running)"), text
    assert "heartbeat:    last " + WHEN.isoformat() in text
    assert not _heavy(modules) and len(modules) <= MODULE_BUDGET, len(modules)


def test_the_version_is_printed_before_any_command_is_imported(tmp_path: Path) -> None:
    r = run_python("-X", "importtime", "-m", "daemon.cli", "--version", env=daemon_env())
    assert r.returncode == 0 and r.stdout.startswith("reverie "), r.stdout
    modules = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines()}
    # The parser of every command imports their modules (~550): none of them is needed here.
    assert not modules & {"argparse", "daemon.cli.chat", "daemon.cli.memory"}, len(modules)
    assert not _heavy(modules), _heavy(modules)


def test_the_command_list_imports_no_command_s_work() -> None:
    # `reverie --help` builds every command's parser: their definitions import the standard
    # library and the CLI's own light modules; what a command runs is imported when it runs.
    r = run_python("-X", "importtime", "-m", "daemon.cli", "--help", env=daemon_env())
    assert r.returncode == 0 and "context" in r.stdout and "handover" in r.stdout, r.stdout
    modules = {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines()}
    assert not _heavy(modules), _heavy(modules)
    assert not modules & {"asyncio", "anyio", "daemon.store.db", "daemon.tools.policy"}
    assert len(modules) <= 160, len(modules)  # 124 measured


def test_the_settings_status_reads_are_the_configured_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    asyncio.run(_fill(home / "reverie.db"))
    (home / "reverie.toml").write_text(
        '[scheduler]\nnightly_sleep = "04:15"\ntimezone = "Pacific/Auckland"\n'
        "[spend]\ndaily_cap_usd = 2.5\n"
    )
    data, modules, _ = _cold_status(home, "--json")
    assert not _heavy(modules), _heavy(modules)
    assert data["spend"]["cap_usd"] == 2.5
    # The persisted nightly run is in the past: the next one comes from the settings.
    nxt = datetime.fromisoformat(data["next_sleep"])
    assert nxt.astimezone(ZoneInfo("Pacific/Auckland")).strftime("%H:%M") == "04:15"
    assert datetime.now(UTC) < nxt < datetime.now(UTC) + timedelta(days=1)


def test_a_configuration_setting_more_is_validated_whole(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    asyncio.run(_fill(home / "reverie.db"))
    toml = home / "reverie.toml"
    toml.write_text("[tools.run]\nnetwork = true\n[spend]\ndaily_cap_usd = 3\n")
    data, modules, _ = _cold_status(home, "--json")
    assert data["running"] is False and data["spend"]["cap_usd"] == 3.0
    assert "pydantic" in modules  # a key status does not read: daemon.settings checked it

    for body, needle in (
        ("[agent]\nmax_tool_steps = 0\n", "config: 'agent.max_tool_steps' = 0 is invalid"),
        ("[spend]\ndaily_cap_usd = -1\n", "config: 'spend.daily_cap_usd' = -1 is invalid"),
        ('[scheduler]\ntimezone = "Mars/Olympus"\n', "unknown time zone 'Mars/Olympus'"),
        ("[agent]\nnmae = 'x'\n", "config: unknown key 'agent.nmae'"),
        ("[spend\n", "is not valid TOML"),
    ):
        toml.write_text(body)
        r = run_python("-m", "daemon.cli", "status", "--home", str(home), env=daemon_env())
        assert r.returncode == 2 and r.stdout == "", (body, r.stdout, r.stderr)
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- StatusSettings against daemon.settings ---------------------------------------------------

VALID: dict[tuple[str, ...], list[Any]] = {
    ("agent", "name"): ["Mira"],
    ("storage", "url"): ["", "postgresql://reverie@db.example:5432/mind"],
    ("storage", "namespace"): ["", "mira"],
    ("storage", "index_build_memory"): ["512MB", " 3 GB "],
    ("store", "busy_timeout_ms"): [0, 250],
    ("chat", "socket"): ["/run/mira.sock", "run/x.sock"],
    ("spend", "daily_cap_usd"): [0, 2, 7.25],
    ("models", "trunk", "context_window"): [1024, 1_000_000],
    ("scheduler", "nightly_sleep"): ["00:00", "23:59", "04:15"],
    ("scheduler", "timezone"): ["Europe/Lisbon", "UTC"],
    ("sleep", "nightly"): [False, True],
    ("log", "level"): ["debug", "error"],
    ("log", "format"): ["json", "console"],
    ("models", "trunk", "provider"): ["offline", "openai"],
    ("models", "trunk", "model"): ["claude-haiku-4-5"],
    ("providers", "anthropic", "base_url"): ["http://127.0.0.1:9"],
    ("memory", "embedder"): ["hash", "none"],
}
INVALID: dict[tuple[str, ...], list[Any]] = {
    ("agent", "name"): [3],
    ("storage", "url"): ["mysql://x/y", "postgresql://u:secret@h/db"],
    ("storage", "index_build_memory"): ["2 gigs", 2],
    ("store", "busy_timeout_ms"): [-1, 1.5],
    ("spend", "daily_cap_usd"): [-0.5, "10"],
    ("models", "trunk", "context_window"): [1023, "big"],
    ("scheduler", "nightly_sleep"): ["24:00", "3:30", "03:3"],
    ("scheduler", "timezone"): ["Mars/Olympus", 5],
    ("sleep", "nightly"): ["yes"],
    ("log", "level"): ["loud"],
    ("models", "trunk", "provider"): ["anthropics"],
    ("memory", "embedder"): ["minilm-v9"],
}


def _table(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        data = {part: data}
    return data


def test_the_defaults_are_the_settings_defaults() -> None:
    assert StatusSettings.read({}) == StatusSettings.of(Settings())


def test_every_checked_key_reads_as_the_settings_validate_it() -> None:
    assert set(VALID) == set(CHECKS)
    for path, values in VALID.items():
        for value in values:
            data = _table(path, value)
            assert StatusSettings.read(data) == StatusSettings.of(Settings.model_validate(data)), (
                path,
                value,
            )


def test_a_value_the_settings_refuse_is_never_read() -> None:
    for path, values in INVALID.items():
        for value in values:
            data = _table(path, value)
            assert StatusSettings.read(data) is None, (path, value)
    # Keys status does not check are left to daemon.settings, valid or not.
    assert StatusSettings.read({"tools": {"run": {"network": True}}}) is None
    assert StatusSettings.read({"spend": {"daily_cap_usd": {"x": 1}}}) is None


def test_the_choices_are_the_settings_choices() -> None:
    for path in CHECKS:
        model: Any = Settings
        for part in path[:-1]:
            model = model.model_fields[part].annotation
        annotation = model.model_fields[path[-1]].annotation
        if typing.get_origin(annotation) is typing.Literal:
            choices = typing.get_args(annotation)
            assert all(CHECKS[path](c) for c in choices), path
            assert not CHECKS[path]("not-" + choices[0]), path


def _utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.mark.parametrize(
    ("hhmm", "zone", "after", "expected"),
    [
        # Later the same day, the next day, and never the instant itself.
        ("03:30", "Europe/London", _utc(2026, 6, 1, 1, 0), _utc(2026, 6, 1, 2, 30)),
        ("03:30", "Europe/London", _utc(2026, 6, 1, 12, 0), _utc(2026, 6, 2, 2, 30)),
        ("03:30", "Europe/London", _utc(2026, 6, 1, 2, 30), _utc(2026, 6, 2, 2, 30)),
        ("03:30", "Europe/London", _utc(2026, 12, 1, 12, 0), _utc(2026, 12, 2, 3, 30)),
        # A time the clocks skip comes as late as the skip makes it (02:30 EST is 03:30 EDT).
        ("02:30", "America/New_York", _utc(2026, 3, 8, 5, 0), _utc(2026, 3, 8, 7, 30)),
        # The day after the change is a day like any (APScheduler 3 skips to the 10th here).
        ("00:00", "America/New_York", _utc(2026, 3, 8, 6, 7), _utc(2026, 3, 9, 4, 0)),
        # A time the clocks pass twice comes once, the first time.
        ("01:30", "America/New_York", _utc(2026, 11, 1, 4, 0), _utc(2026, 11, 1, 5, 30)),
        ("01:30", "America/New_York", _utc(2026, 11, 1, 5, 45), _utc(2026, 11, 2, 6, 30)),
        # Lord Howe moves its clocks by half an hour (02:00 → 02:30 on 2026-10-04): 02:45 then.
        ("02:15", "Australia/Lord_Howe", _utc(2026, 10, 3, 12, 0), _utc(2026, 10, 3, 15, 45)),
        ("23:59", "Pacific/Auckland", _utc(2026, 6, 1, 0, 0), _utc(2026, 6, 1, 11, 59)),
    ],
)
def test_the_next_time_of_day(hhmm: str, zone: str, after: datetime, expected: datetime) -> None:
    got = next_time_of_day(hhmm, ZoneInfo(zone), after)
    assert got.astimezone(UTC) == expected
    assert got > after
