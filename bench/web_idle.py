"""The console's idle cost: a page open in a real browser, nobody doing anything.

    python -m bench.web_idle                    # 60 s per case
    python -m bench.web_idle --idle 300 --pages / /chat

The real daemon runs against the fake Messages API (any model call would be counted there,
and in the usage ledger) with `[web] enabled`. Cases: the console off; on with no page open;
on with a headless Chromium holding each page in `--pages` open (logged in through a
one-time link, its live stream connected). After the page has loaded and settled, over the
idle window: HTTP requests the console served (`status` → web.requests, uvicorn's own
count), model calls (the fake API's count and the usage ledger's rows), and the daemon
process's CPU seconds. Expected: zero requests and zero model calls, whatever the page —
live updates arrive over the one open event stream, nothing is polled.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.process import cpu_seconds, model_calls  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic  # noqa: E402
from tests.harness import Client, DaemonProcess, daemon_env  # noqa: E402
from tests.web_harness import (  # noqa: E402
    chromium_missing,
    free_port,
    start_browser,
    start_console,
    wait_live,
)

# What a page's own start-up may still be doing (its first requests) before idle is measured.
SETTLE_S = 2.0


def _web_status(daemon: DaemonProcess) -> dict[str, Any]:
    with Client(daemon.socket_path, timeout=10) as c:
        c.hello()
        return c.command("status")["data"].get("web") or {}


def _measure(daemon: DaemonProcess, fake: FakeAnthropic, idle_s: float) -> dict[str, Any]:
    assert daemon.proc is not None
    web = _web_status(daemon)
    before = {
        "requests": web.get("requests", 0),
        "calls": len(fake.message_requests),
        "ledger": model_calls(daemon.home),
        "cpu": cpu_seconds(daemon.proc.pid),
    }
    time.sleep(idle_s)
    cpu = cpu_seconds(daemon.proc.pid) - before["cpu"]
    web = _web_status(daemon)
    return {
        "idle_s": idle_s,
        "http_requests": web.get("requests", 0) - before["requests"],
        "pages_open": web.get("pages_open", 0),
        "model_calls": len(fake.message_requests) - before["calls"],
        "ledger_rows": model_calls(daemon.home) - before["ledger"],
        "cpu_seconds": round(cpu, 3),
        "cpu_percent": round(100 * cpu / idle_s, 3),
    }


def run_case(page: str | None, console_on: bool, idle_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
        root = Path(tmp)
        env = {"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}
        if console_on:
            console = start_console(root, env=env)
            daemon = console.daemon
        else:
            home = root / "home"
            home.mkdir()
            (home / "reverie.toml").write_text(f'[web]\nlisten = "127.0.0.1:{free_port()}"\n')
            daemon = DaemonProcess(home=home, env=daemon_env(env)).start()
        driver = None
        profile = root / "chromium"
        try:
            time.sleep(1.0)  # start-up's own work (tokenizer warm-up) is not idle
            loaded: dict[str, Any] = {}
            if page is not None:
                driver = start_browser(profile)
                console.login(driver)
                driver.get(console.base_url + page)
                wait_live(driver)
                time.sleep(SETTLE_S)
                loaded = {"requests_to_load": _web_status(daemon).get("requests", 0)}
            result = _measure(daemon, fake, idle_s)
        finally:
            if driver is not None:
                driver.quit()
            daemon.stop()
            shutil.rmtree(profile, ignore_errors=True)
        case = "console off" if not console_on else (f"page {page} open" if page else "no page")
        return {"case": case, **loaded, **result}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle", type=float, default=60.0, help="seconds idle per case")
    ap.add_argument("--pages", nargs="+", default=["/", "/chat"], help="pages to hold open")
    args = ap.parse_args()
    missing = chromium_missing()
    if missing:
        raise SystemExit(f"bench.web_idle needs Chromium: {missing}")
    results = [run_case(None, False, args.idle), run_case(None, True, args.idle)]
    results += [run_case(page, True, args.idle) for page in args.pages]
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "web_idle.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
