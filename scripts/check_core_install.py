"""Install Reverie with only its core dependencies into a fresh venv and fetch an HTML page.

A dependency the code imports but pyproject.toml does not declare can still be present in a
developer's venv (another package brought it, or pip resolved it one day and not the next).
This check installs the package as a user would — `pip install <checkout>`, no extras — into
a virtual environment of its own, then fetches an HTML page from a loopback server through
`fetch_url` as the agent calls it, and requires the page's main text back: extraction ran, its
imports resolved. Exit status 0 when it holds; otherwise what failed, and non-zero.

    python3 scripts/check_core_install.py          # .ci/run calls it after the tests
    python3 scripts/check_core_install.py --keep   # leave the venv behind to look at

It takes about a minute with pip's cache warm (a fresh venv resolves and installs every core
dependency), which is why it runs as its own CI step rather than inside the default test run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

ARTICLE = b"""<!doctype html>
<html><head><title>Kingfishers on the Cherwell</title>
<script>var beacon = "pixel-4410";</script></head>
<body>
<nav><a href="/">Front page</a> | <a href="/subscribe">Subscribe today</a></nav>
<article>
<h1>Kingfishers nest again on the Cherwell</h1>
<p>Three kingfisher pairs have dug nesting burrows in the clay banks below the old weir,
the first confirmed nests on this stretch of the river for more than a decade.</p>
<p>Surveyors credit the cleaner water and the willow planting of recent winters, which left
the banks steep, shaded and quiet enough for the birds to raise their young.</p>
</article>
<footer>Cookie preferences - Copyright 2026 Valley Gazette</footer>
</body></html>
"""


def inside() -> int:
    """Run in the fresh venv: serve ARTICLE on loopback and fetch it with `fetch_url`."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import anyio

    import daemon
    from daemon.settings import FetchSettings, Settings, ToolsSettings
    from daemon.tools.fetch_tool import fetch_tools
    from daemon.tools.registry import ToolContext, ToolRegistry

    # The package must be the installed one, never the checkout next to this script.
    where = Path(daemon.__file__).resolve()
    if Path(sys.prefix).resolve() not in where.parents:
        print(f"check: daemon imported from {where}, not from the fresh venv", file=sys.stderr)
        return 1

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(ARTICLE)))
            self.end_headers()
            self.wfile.write(ARTICLE)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    # fetch_url refuses loopback; the allowance names exactly this server's address and port.
    settings = Settings(tools=ToolsSettings(fetch=FetchSettings(allow_hosts=[f"127.0.0.1:{port}"])))
    registry = ToolRegistry()
    for tool in fetch_tools(settings):
        registry.register(tool)

    async def call() -> str:
        with anyio.fail_after(60):
            outcome = await registry.call(
                "fetch_url",
                {"url": f"http://127.0.0.1:{port}/kingfishers"},
                ToolContext(session_id="core-install", turn_id="check"),
            )
        if outcome.is_error:
            raise SystemExit(f"check: fetch_url failed: {outcome.content}")
        return outcome.content

    try:
        text = anyio.run(call)
    finally:
        server.shutdown()
    wanted = "the first confirmed nests on this stretch of the river"
    # Words only the page's navigation, script and footer hold: the fallback that strips tags
    # keeps them, the extraction leaves them out.
    chrome = ("Subscribe today", "pixel-4410", "Cookie preferences")
    if wanted not in text or any(word in text for word in chrome):
        print(f"check: fetch_url did not extract the article:\n{text}", file=sys.stderr)
        return 1
    print(f"check: fetch_url extracted the article in a core-only install ({where.parent})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep", action="store_true", help="leave the venv behind")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        return inside()
    work = Path(tempfile.mkdtemp(prefix="reverie-core-install-"))
    venv = work / "venv"
    started = time.monotonic()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        # A plain install of the checkout: the core dependencies, no extras, not editable.
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        pip.append("--no-compile")  # bytecode is not what is checked; ~10 s saved
        done = subprocess.run([*pip, str(REPO)], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"check: pip could not install {REPO}:\n{done.stderr}", file=sys.stderr)
            return 1
        # -I: nothing from the environment or the current directory on sys.path, so only the
        # venv's own packages can be imported. Run from the empty work directory.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        checked = subprocess.run(
            [str(python), "-I", str(Path(__file__).resolve()), "--inside"], cwd=work, env=env
        )
        print(f"check: {time.monotonic() - started:.0f} s in all")
        return checked.returncode
    finally:
        if args.keep:
            print(f"check: the venv is left at {venv}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
