"""Where a command's home and the daemon's socket are (standard library only).

One resolver for every command: the forwarder asks it before anything heavy is imported,
and the direct path builds its `Home` from the same answer. `socket_path` reads the socket
setting without the settings module (a forwarded command cannot afford pydantic);
`socket_for` is what a client that has loaded the settings uses (`reverie chat`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from daemon.paths import Home


def home_dir(args: Any) -> str:
    """The home `--home` names, else `$REVERIE_HOME`, `$STATE_DIRECTORY` (its first entry) or ./var."""
    raw = getattr(args, "home", None)
    env = os.environ
    if raw:
        return os.path.expanduser(raw)
    if env.get("REVERIE_HOME"):
        return os.path.expanduser(env["REVERIE_HOME"])
    if env.get("STATE_DIRECTORY"):
        # systemd may pass several colon-separated directories; the first is ours.
        return env["STATE_DIRECTORY"].split(":")[0]
    return os.path.join(os.getcwd(), "var")


def socket_path(home: str, config: str | None) -> str | None:
    """Resolve the socket the way the settings do (home TOML → --config → environment).

    Returns None when a configuration file cannot be read: the full CLI then reports it.
    """
    configured: str | None = None
    for path in (
        os.path.join(home, "reverie.toml"),
        os.path.expanduser(config) if config else None,
    ):
        if path is None or not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            return None
        if not any(
            "socket" in line and not line.lstrip().startswith("#") for line in text.splitlines()
        ):
            continue  # nothing here can set it: spare the TOML parser's import
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return None
        chat = data.get("chat")
        if isinstance(chat, dict) and isinstance(chat.get("socket"), str) and chat["socket"]:
            configured = chat["socket"]
    configured = os.environ.get("REVERIE_SOCKET") or configured
    if configured:
        return os.path.join(home, os.path.expanduser(configured))  # an absolute path stays as it is
    if os.environ.get("RUNTIME_DIRECTORY"):
        return os.path.join(os.environ["RUNTIME_DIRECTORY"].split(":")[0], "reverie.sock")
    return os.path.join(home, "run", "reverie.sock")


def socket_for(home: Home, configured: str | None, *, announce: bool = True) -> Path:
    """Resolve the daemon's chat socket for a client.

    The home's own socket first; when it is absent and nothing pins the path, the
    sockets of the shipped systemd units (a shell does not see the service's
    `$RUNTIME_DIRECTORY`), saying so on stderr when one is used.
    """
    from daemon.systemd import unit_socket_paths

    primary = home.socket_path(configured)
    if primary.exists() or configured or os.environ.get("RUNTIME_DIRECTORY"):
        return primary
    for candidate in unit_socket_paths():
        if candidate.exists():
            if announce:
                print(
                    f"reverie: no daemon socket at {primary}; using the systemd unit's {candidate}",
                    file=sys.stderr,
                )
            return candidate
    return primary
