"""Where the configuration comes from: the shipped TOML, a home's `reverie.toml`, `--config`, the environment.

Standard library only: the layers are read and merged here, validated by `daemon.settings`
(pydantic). A command that needs a few values and not the whole validated configuration
(`reverie status` with the daemon down, `daemon.status_offline`) reads the merged layers
itself. Secrets never have to live in a file: `secret` reads a key by name from the
environment, then from systemd credentials (`$CREDENTIALS_DIRECTORY/<name>`).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from daemon.errors import ReverieError
from daemon.paths import shipped_dir


class ConfigError(ReverieError):
    """A configuration problem, phrased as one line a person can act on."""


def server_url_problem(url: str) -> str | None:
    """Why `url` cannot name the store's server (not postgresql://, or it holds a password), or None."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        return f"{url!r} is not a postgresql://user@host/db URL"
    if parts.password or "password=" in parts.query:
        return (
            "the URL holds a password: put it in REVERIE_STORAGE_PASSWORD, PGPASSWORD, "
            "~/.pgpass or the systemd credential reverie-storage-password instead"
        )
    return None


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable (permission denied)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory, expected a TOML file") from None


ENV_SCALARS: dict[str, tuple[str, ...]] = {
    "REVERIE_LOG_LEVEL": ("log", "level"),
    "REVERIE_LOG_FORMAT": ("log", "format"),
    "REVERIE_SOCKET": ("chat", "socket"),
    "REVERIE_TRUNK_PROVIDER": ("models", "trunk", "provider"),
    "REVERIE_TRUNK_MODEL": ("models", "trunk", "model"),
    "REVERIE_ANTHROPIC_BASE_URL": ("providers", "anthropic", "base_url"),
    "REVERIE_EMBEDDER": ("memory", "embedder"),
    "REVERIE_DAILY_CAP_USD": ("spend", "daily_cap_usd"),
}


def env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for var, path in ENV_SCALARS.items():
        if var in environ and environ[var] != "":
            node = out
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = environ[var]
    return out


def read_layers(
    home: Path | None, config_file: Path | None = None, environ: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The merged configuration (later layers win) and the names of the layers that set it.

    The names start with "embedded defaults"; a missing or unreadable file raises `ConfigError`.
    """
    env = dict(os.environ if environ is None else environ)
    sources = ["embedded defaults"]
    data = read_toml(shipped_dir() / "reverie.toml")
    if home is not None and (home / "reverie.toml").exists():
        data = merge(data, read_toml(home / "reverie.toml"))
        sources.append(str(home / "reverie.toml"))
    if config_file is not None:
        data = merge(data, read_toml(config_file))
        sources.append(str(config_file))
    overrides = env_overrides(env)
    if overrides:
        data = merge(data, overrides)
        sources.append("environment")
    return data, sources


def secret(name: str, environ: dict[str, str] | None = None) -> str | None:
    """Read a secret by name: the environment first, then systemd credentials."""
    env = os.environ if environ is None else environ
    value = env.get(name)
    if value:
        return value.strip()
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if cred_dir:
        for candidate in (name, name.lower()):
            path = Path(cred_dir) / candidate
            if path.is_file():
                return path.read_text().strip() or None
    return None
