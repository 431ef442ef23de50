"""`reverie doctor`'s look at the Matrix channel: its token, and the running daemon's view of
it or (no daemon) one `whoami` and `joined_rooms` against the homeserver."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from daemon.channels.matrix_api import MatrixConfigError, matrix_token
from daemon.channels.matrix_store import DEVICE_FILE, spaced
from daemon.settings import MatrixSettings

PROBE_TIMEOUT_S = 10.0
NAME = "matrix"


def matrix_checks(
    settings: MatrixSettings,
    live: Mapping[str, Any] | None,
    environ: Mapping[str, str] | None = None,
    *,
    crypto_dir: Path | None = None,
) -> list[tuple[str, str, str]]:
    """(status ok|warn|fail, detail, fix) lines for the channel; none when it is off.

    `live` is the running daemon's `status` "matrix" section, or None when no daemon answers;
    then the bot device's fingerprint is read from `crypto_dir` (the channel's key store).
    """
    if not settings.enabled:
        return []
    if live is not None:
        return [_live(live)]
    try:
        token = matrix_token(settings, environ)
    except MatrixConfigError as exc:
        return [("fail", str(exc), "see docs/channels.md, Matrix: where the access token goes")]
    return [_probe(settings, token), *_device(crypto_dir)]


def _device(crypto_dir: Path | None) -> list[tuple[str, str, str]]:
    """The bot device's id and ed25519 fingerprint as the daemon last saved them."""
    try:
        device = json.loads((crypto_dir / DEVICE_FILE).read_text()) if crypto_dir else None
    except (OSError, ValueError):
        return []
    if not isinstance(device, dict) or not device.get("ed25519"):
        return []
    return [
        (
            "ok",
            f"e2ee device {device.get('device_id')}, ed25519 {spaced(str(device['ed25519']))} "
            "(compare it with the bot's session in Element)",
            "",
        )
    ]


def _live(mx: Mapping[str, Any]) -> tuple[str, str, str]:
    state, detail = str(mx.get("state")), str(mx.get("detail") or "")
    encrypted = list(mx.get("encrypted_rooms") or [])
    if state == "connected":
        line = f"connected in the daemon as {mx.get('user_id')} ({mx.get('rooms', 0)} room(s))"
        e2ee = mx.get("e2ee") or {}
        if e2ee.get("ed25519"):
            # What the person compares in Element to verify the bot's device by hand.
            line += f"; e2ee device {e2ee.get('device_id')}, ed25519 {e2ee['ed25519']}"
        if e2ee.get("problem"):
            return (
                "warn",
                f"{line}; {e2ee['problem']}",
                "the bot's device keys are not on the homeserver: give the bot a token of its "
                "own login, not one copied from another client (docs/channels.md, Encryption)",
            )
        if encrypted:
            return (
                "warn",
                f"{line}; refused end-to-end encrypted room(s): {', '.join(encrypted)} "
                f"({e2ee.get('reason') or 'no encryption support'})",
                "install the matrix extra (pip install '.[matrix]') and restart, or use "
                "an unencrypted room (docs/channels.md, Encryption)",
            )
        return ("ok", line, "")
    if state == "refused":
        return ("fail", f"refused in the daemon: {detail}", "see docs/channels.md, Matrix")
    if mx.get("backoff_s") is not None:
        left = max(0.0, float(mx.get("retry_at") or 0) - time.time())
        detail = f"{detail}; next try in {left:.0f} s (backoff {mx['backoff_s']} s)"
    return (
        "warn",
        f"{state} in the daemon: {detail}".rstrip(": "),
        "the daemon keeps retrying with backoff; `reverie status` shows it",
    )


def _probe(settings: MatrixSettings, token: str) -> tuple[str, str, str]:
    base = settings.homeserver.rstrip("/")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, headers=headers) as client:
            who = client.get(f"{base}/_matrix/client/v3/account/whoami")
            if who.status_code in (401, 403):
                return ("fail", "the homeserver refused the access token", "log in again")
            who.raise_for_status()
            rooms = client.get(f"{base}/_matrix/client/v3/joined_rooms")
            rooms.raise_for_status()
            me = who.json().get("user_id")
            joined = set(rooms.json().get("joined_rooms") or [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return (
            "fail",
            f"homeserver {base} not reachable: {type(exc).__name__}: {exc}",
            "check [channels.matrix] homeserver and the network",
        )
    if me != settings.user_id:
        return ("fail", f"the access token is {me}'s, not {settings.user_id}'s", "")
    missing = [r for r in settings.rooms if r not in joined]
    if missing:
        return (
            "warn",
            f"token of {me} works; not yet in {', '.join(missing)}",
            f"invite {me} to the room(s) from your account; the daemon joins when invited",
        )
    return ("ok", f"token of {me} works; in all {len(settings.rooms)} room(s)", "")
