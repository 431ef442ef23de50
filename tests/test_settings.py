"""Configuration: layering, environment overrides, secrets, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.settings import ConfigError, load_settings, secret, server_url_problem


def test_embedded_defaults_load_and_the_shipped_file_documents_them(tmp_path: Path) -> None:
    s = load_settings(None)
    assert s.models.trunk.provider == "auto" and s.agent.compaction_threshold == 0.8
    # A home's reverie.toml (a copy of the shipped one) changes nothing by itself.
    from daemon.paths import Home

    home = Home(tmp_path / "h")
    home.ensure()
    assert load_settings(home.root) == s


def test_layers_home_then_config_then_environment(tmp_path: Path) -> None:
    (tmp_path / "reverie.toml").write_text(
        "[agent]\nmax_tool_steps = 5\n[spend]\ndaily_cap_usd = 3\n"
    )
    extra = tmp_path / "extra.toml"
    extra.write_text("[agent]\nmax_tool_steps = 7\n")
    s = load_settings(
        tmp_path, extra, environ={"REVERIE_DAILY_CAP_USD": "1.5", "REVERIE_TRUNK_MODEL": "claude-x"}
    )
    assert s.agent.max_tool_steps == 7
    assert s.spend.daily_cap_usd == 1.5
    assert s.models.trunk.model == "claude-x"
    assert s.models.summariser.model == "claude-haiku-4-5"  # untouched siblings keep defaults


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[agent]\nmax_tool_steps = 'x'\n", "'agent.max_tool_steps' = 'x' is invalid"),
        ("[agent]\nmax_tool_steps = 0\n", "greater than or equal to 1"),
        ("[chat]\nsockett = 'x'\n", "unknown key 'chat.sockett'"),
        ("[scheduler]\nnightly_sleep = '25:00'\n", "scheduler.nightly_sleep"),
        ("agent = 3\n", "'agent' = 3"),
        ("[scheduler]\ntimezone = 'Mars/Olympus'\n", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_errors_name_key_value_and_expectation(tmp_path: Path, toml: str, needle: str) -> None:
    (tmp_path / "reverie.toml").write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path)
    message = str(err.value)
    assert needle in message and "\n" not in message
    assert str(tmp_path / "reverie.toml") in message


def test_missing_config_file_is_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(None, tmp_path / "nope.toml")


def test_secret_from_environment_or_systemd_credentials(tmp_path: Path) -> None:
    assert secret("MY_KEY", {"MY_KEY": " abc \n"}) == "abc"
    (tmp_path / "MY_KEY").write_text("from-credential\n")
    assert secret("MY_KEY", {"CREDENTIALS_DIRECTORY": str(tmp_path)}) == "from-credential"
    assert secret("OTHER", {"CREDENTIALS_DIRECTORY": str(tmp_path)}) is None


def test_a_storage_url_names_a_postgresql_server_without_a_password() -> None:
    assert server_url_problem("postgresql://ada@db.lan:5432/reverie") is None
    assert server_url_problem("postgres://ada@db.lan/reverie?sslmode=require") is None
    assert "password" in (server_url_problem("postgresql://ada:s3cret@db.lan/reverie") or "")
    assert "password" in (server_url_problem("postgresql://db.lan/r?password=s3cret") or "")
    assert "not a postgresql" in (server_url_problem("mysql://ada@db.lan/reverie") or "")
