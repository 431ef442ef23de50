"""The console under test: a real daemon with `[web] enabled`, and a real headless Chromium.

`console` (fixture) starts a daemon subprocess (tests/harness.py, the offline model unless a
test's config says otherwise) serving the console on a free loopback port; `browser` adds a
Selenium-driven Debian Chromium, logged in through a one-time link made with the home's
token. `screenshot(driver, name)` writes `test-artifacts/web/<name>.png`. Without Chromium or
chromedriver the browser tests skip with one line saying what to install.

Use: `from tests.web_harness import browser, console  # noqa: F401` in a test module, or
`start_console(tmp_path, config, env)` and `open_browser(console)` for a daemon of your own
(the fake Messages API, approvals).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import REPO, DaemonProcess, daemon_env, run_cli, unavailable

ARTIFACTS = REPO / "test-artifacts" / "web"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# As root, and on a machine whose network is closed: without the background-networking
# flags Chromium hangs on lookups it would make at start.
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def web_config(port: int, extra: str = "") -> str:
    return f'[web]\nenabled = true\nlisten = "127.0.0.1:{port}"\n{extra}'


@dataclass
class Console:
    """A daemon serving the console, and how to reach it."""

    daemon: DaemonProcess
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.daemon.home

    def login_link(self) -> str:
        """A fresh one-time login link, as `reverie web` prints it."""
        out = run_cli("web", "--home", str(self.home), env=self.daemon.env)
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            if line.startswith("log in:"):
                return line.split(None, 2)[2].strip()
        raise AssertionError(f"no login link in: {out.stdout}")

    def signed_link(self) -> str:
        """A one-time login link signed here with the home's token (what `reverie web` does)."""
        from daemon.web.auth import login_link

        token = (self.home / "web.token").read_text().strip()
        return f"{self.base_url}/login?once={login_link(token)}"

    def login(self, driver: Any) -> None:
        """Log `driver` in through a one-time link and wait for the page to be live."""
        driver.get(self.signed_link())
        wait_for(driver, lambda d: "/login" not in d.current_url, "the login to go through")
        wait_live(driver)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=10.0)


def start_console(root: Path, config: str = "", env: dict[str, str] | None = None) -> Console:
    """Scaffold a home in `root` with the console on and start its daemon."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (home / "reverie.toml").write_text(web_config(port) + "\n" + config)
    daemon = DaemonProcess(home=home, env=daemon_env(env)).start()
    console = Console(daemon=daemon, port=port)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return console
        except OSError:
            time.sleep(0.05)
    daemon.stop()
    raise AssertionError(f"the console did not listen on {port}:\n{daemon.logs()}")


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def run_daemon_at(
    home: Path, when: datetime, *, seconds: float, speed: int = 1, kill: bool = False
) -> DaemonProcess:
    """Run the real daemon in `home` as if it were `when` (libfaketime), its clock going
    `speed` times as fast, for about `seconds`; then stop it (SIGTERM), or `kill` it (SIGKILL).

    Skips the test when libfaketime is missing (apt-get install faketime).
    """
    if not FAKETIME_LIB.exists():
        unavailable(f"{FAKETIME_LIB} is missing (apt-get install faketime)")
    faked = f"@{when.astimezone(UTC):%Y-%m-%d %H:%M:%S}" + (f" x{speed}" if speed != 1 else "")
    env = daemon_env({"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": faked, "TZ": "UTC"})
    daemon = DaemonProcess(home=home, env=env).start(timeout=60)
    time.sleep(seconds)
    if kill:
        daemon.kill()
    else:
        assert daemon.stop() == 0, daemon.logs()
    return daemon


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (scripts/setup.sh dev installs it)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def start_browser(profile: Path) -> Any:
    """A headless Chromium driven by Selenium, with a fresh profile in `profile`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return driver


def wait_for(driver: Any, pred: Callable[[Any], Any], what: str, timeout: float = 15.0) -> Any:
    """Wait until `pred(driver)` is truthy and return it; fail saying what did not happen."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(pred)
    except TimeoutException:
        screenshot(driver, "timeout-" + "".join(c if c.isalnum() else "-" for c in what)[:60])
        raise AssertionError(f"timed out waiting for {what} (at {driver.current_url})") from None


def wait_live(driver: Any) -> None:
    """Wait until the page's event stream is open and has said hello (live.js marks the body)."""
    wait_for(
        driver,
        lambda d: d.execute_script("return document.body.getAttribute('data-live-ready') === '1';"),
        "the page's live stream to open",
    )


def screenshot(driver: Any, name: str) -> Path:
    """Save the browser's view as test-artifacts/web/NAME.png (looked at before release)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    """A daemon with the console on (offline model), stopped after the test."""
    running = start_console(tmp_path)
    try:
        yield running
    finally:
        running.daemon.stop()


@dataclass
class Browser:
    console: Console
    driver: Any

    @property
    def base_url(self) -> str:
        return self.console.base_url

    def login(self, driver: Any | None = None) -> None:
        self.console.login(driver or self.driver)

    def screenshot(self, name: str) -> Path:
        return screenshot(self.driver, name)

    def open(self, path: str) -> None:
        self.driver.get(self.base_url + path)


@contextmanager
def open_browser(console: Console) -> Iterator[Browser]:
    """A headless Chromium logged in to `console` (skips the test when Chromium is missing)."""
    missing = chromium_missing()
    if missing:
        unavailable(f"browser tests need Chromium: {missing}")
    profile = Path(tempfile.mkdtemp(prefix="reverie-chromium-"))
    driver = start_browser(profile)
    try:
        console.login(driver)
        yield Browser(console=console, driver=driver)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(console: Console) -> Iterator[Browser]:
    """A logged-in headless Chromium on the offline console."""
    with open_browser(console) as b:
        yield b
