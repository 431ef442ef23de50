"""The console's pages in a real headless Chromium against a real daemon (offline model).

A conversation goes to the daemon over its socket while the Now page is open, and the page
shows the turns without a reload (its live part refreshes on the `/events` stream); then, as
a person would: open the context of a turn, search memory, put the agent to sleep and revert
what its dream changed in a topic file — and see the file restored on disk. Every page is
saved as a screenshot in test-artifacts/web/.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemon.paths import Home
from tests.harness import Client
from tests.web_harness import (  # noqa: F401
    Browser,
    Console,
    browser,
    run_daemon_at,
    start_console,
    wait_for,
    wait_live,
)

TALK = (
    "My sister Ana lives in Lisbon.",
    "We decided to feed the sourdough starter twice a day with rye flour.",
)


def _text(driver: Any, css: str) -> str:
    """The text of the first element matching `css` now ("" when none, or when a live refresh
    or a navigation replaced it while it was being read)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""


# The daemon's past in the home the console opens: two days ago it ran at noon (stopped
# cleanly) and in the evening (killed); yesterday it did not run. Its clock runs fast then
# (libfaketime), so each run spans a visible stretch of the timeline.
PAST_SPEED = 300


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    home = tmp_path / "home"
    day1 = (datetime.now(UTC) - timedelta(days=2)).replace(hour=12, minute=0, second=0)
    run_daemon_at(home, day1, seconds=4, speed=PAST_SPEED)
    run_daemon_at(home, day1.replace(hour=18), seconds=4, speed=PAST_SPEED, kill=True)
    running = start_console(tmp_path)
    try:
        yield running
    finally:
        running.daemon.stop()


def _bands(driver: Any) -> list[tuple[str, str]]:
    """The timeline's state bands: (state, what hovering it says)."""
    return [
        (str(state), str(title))
        for state, title in driver.execute_script(
            "return Array.from(document.querySelectorAll('#timeline rect.band')).map("
            "  r => [r.getAttribute('class').replace('band band-', ''),"
            "        r.querySelector('title').textContent]);"
        )
    ]


def _run_rows(home: Home) -> list[tuple[str, str, str | None, str | None]]:
    with closing(sqlite3.connect(f"file:{home.db_file}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "SELECT started_at, seen_at, stopped_at, ended FROM daemon_runs ORDER BY started_at"
        ).fetchall()
    return [tuple(r) for r in rows]


def _revision_files(home: Home, rev_id: str) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(f"file:{home.db_file}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT files FROM dream_revisions WHERE id = ?", (rev_id,)).fetchone()
    files: list[dict[str, Any]] = json.loads(row[0])
    return files


def _night_caught_up(home: Home) -> bool:
    """The night missed since the past runs has been slept, and no sleep is under way: the
    daemon catches its first missed night up as soon as it starts (`daemon.scheduler`)."""
    with closing(sqlite3.connect(f"file:{home.db_file}?mode=ro", uri=True)) as db:
        states = [r[0] for r in db.execute("SELECT status FROM sleep_cycles").fetchall()]
    return "done" in states and "running" not in states


def test_a_person_reads_the_pages_and_reverts_a_dream(browser: Browser) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    driver = browser.driver
    daemon = browser.console.daemon
    home = Home(browser.console.home)

    # The night missed since the past runs is caught up at this start: the timeline is read
    # once it has been slept (before, its bands depend on how far the catch-up got).
    wait_for(driver, lambda _d: _night_caught_up(home), "the missed night to be caught up", 60)
    browser.open("/")
    wait_live(driver)
    assert "Shown: 0 turns" in _text(driver, "#now-state")
    # The timeline: off until the first run two days ago, awake while each run lasted (the
    # killed one says so), off from its last sign of life through yesterday, awake today,
    # with the night caught up at today's start (winding down, asleep, awake again).
    runs = _run_rows(home)
    assert [r[3] for r in runs] == ["stopped", "lost", None], runs
    bands = _bands(driver)
    assert [state for state, _ in bands] == [
        "off", "awake", "off", "awake", "off", "awake", "winding-down", "asleep", "awake"
    ], bands  # fmt: skip
    day1 = datetime.fromisoformat(runs[0][0])
    for (_state, title), (began, _seen, stopped, _ended) in zip(bands[1:4:2], runs, strict=False):
        start, end = datetime.fromisoformat(began), datetime.fromisoformat(stopped)
        assert title.startswith(f"awake {start:%Y-%m-%d %H:%M} → {end:%H:%M}"), title
        assert end - start > timedelta(minutes=10)  # a stretch, not a hairline
    assert "without a clean stop" in bands[3][1] and "clean stop" not in bands[1][1]
    lost_seen = datetime.fromisoformat(runs[1][1])
    today = datetime.fromisoformat(runs[2][0])
    assert bands[4][1].startswith(
        f"off (not running) {lost_seen:%Y-%m-%d %H:%M} → {today:%Y-%m-%d %H:%M}"
    )
    assert (today.date() - day1.date()).days == 2  # the whole day between is off
    browser.screenshot("pages-now-timeline")
    turns = []
    with Client(daemon.socket_path, timeout=60) as chat:
        chat.hello()
        for text in TALK:
            accepted, _frames = chat.chat(text)
            turns.append(accepted["turn_id"])
    # No reload: the page's live part asks for itself again when the daemon says a turn ended.
    wait_for(
        driver,
        lambda d: f"Shown: {len(TALK)} turns" in _text(d, "#now-state"),
        "the Now page to show the new turns live",
    )
    browser.screenshot("pages-now")

    # The context of a turn: its bar or its row opens it.
    browser.open("/context")
    driver.find_element(By.LINK_TEXT, turns[0]).click()
    wait_for(driver, lambda d: _text(d, "#turn-detail"), "the turn's context")
    detail = _text(driver, "#turn-detail")
    assert TALK[0] in driver.find_element(By.CSS_SELECTOR, "blockquote.prompt").text
    assert "As the turn ran:" in detail and "persona" in detail
    why = driver.find_elements(By.CSS_SELECTOR, "#turn-detail .why")
    assert why and all(w.text.startswith("in ") for w in why if w.text)
    browser.screenshot("pages-context")

    # Search memory from the Memory page's form.
    browser.open("/memory")
    box = driver.find_element(By.CSS_SELECTOR, "form.search input[name=q]")
    box.send_keys("Lisbon")
    box.submit()
    wait_for(driver, lambda d: _text(d, "#results"), "the search results")
    assert "Lisbon" in _text(driver, "#results")
    browser.screenshot("pages-memory")

    # A night's sleep: the offline dream adds a lesson to a topic file.
    with Client(daemon.socket_path, timeout=120) as chat:
        chat.hello()
        slept = chat.command("sleep", {"wait": True})
        assert slept["type"] == "result", slept
    browser.open("/sleep")
    wait_live(driver)
    button = driver.find_element(By.CSS_SELECTOR, "form.revert button")
    rev_id = button.text.removeprefix("Revert ").strip()
    files = _revision_files(home, rev_id)
    topic = home.root / files[0]["path"]
    assert topic.read_text() == files[0]["after"]
    browser.screenshot("pages-sleep")
    button.click()
    wait_for(
        driver,
        lambda d: f"reverted {rev_id}" in _text(d, "main"),
        "the revert to be confirmed",
    )
    assert topic.read_text() == files[0]["before"]
    assert driver.execute_script("return location.pathname") == "/sleep"
    browser.screenshot("pages-sleep-reverted")

    for path, name in (
        ("/journal", "pages-journal"),
        ("/charts", "pages-charts"),
        ("/", "pages-now-after-sleep"),
    ):
        browser.open(path)
        wait_live(driver)
        assert not driver.find_elements(By.CSS_SELECTOR, "p.error")
        browser.screenshot(name)
        if path == "/charts":
            # The night just slept, on an axis of distinct, evenly stepped values in a unit.
            sleep = driver.find_element(By.CSS_SELECTOR, "svg[aria-label='sleep per night']")
            driver.execute_script("arguments[0].scrollIntoView()", sleep)
            ticks = [t.text for t in sleep.find_elements(By.CSS_SELECTOR, "text.tick")]
            unit = sleep.find_element(By.CSS_SELECTOR, "text.unit").text
            assert len(set(ticks)) == len(ticks) >= 2 and float(ticks[0]) == 0, ticks
            assert unit in ("seconds", "minutes", "hours"), unit
            browser.screenshot("pages-charts-sleep")
