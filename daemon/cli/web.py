"""`reverie web [--open]`: the console's address and a one-time login link.

The link is signed with the console's token (`<home>/web.token`, made 0600 on first use), so
only someone who can read the token can make one; it works once and for two minutes. The
running daemon is asked (over its socket) whether its console listens, so a daemon that is
down, or whose console is off or could not start, is said plainly instead of a dead link.
"""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.locate import socket_for
from daemon.cli.support import CommandError, resolve_env


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "web",
        parents=[common],
        help="the web console's address and a one-time login link",
        description="Print the console's URL and a one-time login link (works once, for two "
        "minutes); --open opens it in the system's browser.",
    )
    p.add_argument("--open", action="store_true", help="open the login link in the browser")
    p.set_defaults(func=cmd_web)


async def cmd_web(args: argparse.Namespace) -> int:
    from daemon.chat.client import ChatError, command
    from daemon.web.auth import ONCE_TTL_S, ensure_token, login_link, token_path

    env = resolve_env(args)
    web = env.settings.web
    config = env.home.config_file
    if not web.enabled:
        raise CommandError(
            f"the web console is off: set `enabled = true` under [web] in {config} "
            "and restart the daemon"
        )
    sock = socket_for(env.home, env.settings.chat.socket)
    try:
        status = await command(sock, "status", timeout=10.0)
    except ChatError as exc:
        raise CommandError(
            f"the daemon is not running, so neither is its console ({exc})"
        ) from None
    console = status.get("web") if isinstance(status, dict) else None
    if not console:
        raise CommandError(
            "the running daemon started with the console off; restart it to serve [web]"
        )
    if console.get("state") != "listening":
        raise CommandError(
            f"the console is not serving: {console.get('error') or console['state']}"
        )
    try:
        token = ensure_token(env.home.root)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CommandError(
            f"cannot read the console's token {token_path(env.home.root)}: {why} "
            "(run this as the daemon's user)"
        ) from None
    url = str(console["url"])
    link = f"{url}login?once={login_link(token)}"
    print(f"console:    {url}")
    if web.address.path:
        print(f"            served on the Unix socket {web.address.path}; reach it through a proxy")
    print(f"log in:     {link}")
    print(
        f"            (works once, within {ONCE_TTL_S / 60:g} minutes; or paste {token_path(env.home.root)})"
    )
    if args.open:
        import webbrowser

        try:
            opened = webbrowser.get().open(link)
        except webbrowser.Error:
            opened = False
        if not opened:
            print("no browser to open here: open the link above yourself")
    return 0
