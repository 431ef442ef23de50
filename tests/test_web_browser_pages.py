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
from contextlib import closing
from typing import Any

from daemon.paths import Home
from tests.harness import Client
from tests.web_harness import Browser, browser, console, wait_for, wait_live  # noqa: F401

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


def _revision_files(home: Home, rev_id: str) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(f"file:{home.db_file}?mode=ro", uri=True)) as db:
        row = db.execute("SELECT files FROM dream_revisions WHERE id = ?", (rev_id,)).fetchone()
    files: list[dict[str, Any]] = json.loads(row[0])
    return files


def test_a_person_reads_the_pages_and_reverts_a_dream(browser: Browser) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    driver = browser.driver
    daemon = browser.console.daemon
    home = Home(browser.console.home)

    browser.open("/")
    wait_live(driver)
    assert "Shown: 0 turns" in _text(driver, "#now-state")
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
