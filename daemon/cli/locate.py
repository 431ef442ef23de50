"""Where a command's home and the daemon's socket are (standard library only).

One resolver for every command: the forwarder asks it before anything heavy is imported,
and the direct path builds its `Home` from the same answer. `socket_path` reads the socket
setting without the settings module (a forwarded command cannot afford pydantic);
`socket_for` is what a command that has loaded the settings uses (`chat`, `status`,
`doctor`, `sleep`, `web`). Both end in `find_socket`, which looks past the home's own
socket path when no daemon listens there: a daemon under systemd listens in its unit's
runtime directory (`$RUNTIME_DIRECTORY`, which a shell does not see).
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
    """Resolve the socket the way the settings do (home TOML → --config → environment),
    then look past an absent one as `find_socket` does.

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
    return find_socket(os.path.join(home, "run", "reverie.sock"), home, pinned=False)


def recorded_socket(home: str) -> str | None:
    """The socket the home's daemon said it listens on (the second line of `reverie.lock`).

    The daemon writes it once its socket listens, so a client finds a daemon whose socket is
    in a runtime directory it cannot see. None when no daemon recorded one.
    """
    try:
        with open(os.path.join(home, "reverie.lock"), encoding="utf-8", errors="replace") as fh:
            lines = fh.read(8192).splitlines()
    except OSError:
        return None
    path = lines[1].strip() if len(lines) > 1 else ""
    return path if os.path.isabs(path) else None


def find_socket(primary: str, home: str, *, pinned: bool, announce: bool = True) -> str:
    """Where a client finds the daemon of `home`, whose own socket path is `primary`.

    `primary` when a socket is there, or when the path is pinned (configured, or
    `$RUNTIME_DIRECTORY` is set: the client runs beside the daemon). Otherwise the socket the
    home's daemon recorded (`recorded_socket`), then the sockets of the shipped systemd units
    (user unit first), the first that exists — saying so on stderr when `announce`, as that
    daemon may serve another home. When none
    exists, `primary`, so "not running" names the home's own path.
    """
    if pinned or os.environ.get("RUNTIME_DIRECTORY") or os.path.exists(primary):
        return primary
    recorded = recorded_socket(home)
    if recorded is not None and recorded != primary and os.path.exists(recorded):
        return recorded  # the home's own daemon: nothing to remark on
    from daemon.systemd import unit_socket_paths  # anyio: only when the home has no socket

    for candidate in unit_socket_paths():
        if candidate.exists():
            if announce:
                print(
                    f"reverie: no daemon socket at {primary}; using the systemd unit's {candidate}",
                    file=sys.stderr,
                )
            return str(candidate)
    return primary


def socket_for(home: Home, configured: str | None, *, announce: bool = True) -> Path:
    """Resolve the daemon's chat socket for a command that has loaded the settings.

    `configured` is `chat.socket` (which `$REVERIE_SOCKET` sets); see `find_socket`.
    """
    from pathlib import Path

    primary = home.socket_path(configured)
    found = find_socket(str(primary), str(home.root), pinned=bool(configured), announce=announce)
    return Path(found)
