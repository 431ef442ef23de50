"""The console in a real headless Chromium against the real daemon: log in, chat, approve, live state.

The trunk talks to the fake Messages API (tests/fakes) so its replies stream word by word and
it can call a tool that asks the person; every other role runs offline. Screenshots of the
login page and the chat page go to test-artifacts/web/.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.fakes.anthropic_server import FakeAnthropic, Planned
from tests.harness import FAKE_API_CONFIG, Client
from tests.web_harness import (
    Browser,
    Console,
    chromium_missing,
    open_browser,
    screenshot,
    start_browser,
    start_console,
    wait_for,
    wait_live,
)

CONFIG = (
    FAKE_API_CONFIG
    + """
[tools]
trunk = ["*"]

[permissions]
approval_timeout_s = 60.0
"""
)

REPLY = (
    "Herons stand still for a long time before they strike, and they can wait in cold water "
    "for an hour without moving a feather while the fish forget them."
)


# One daemon and one browser for the tests of this module that talk to the fake API (each
# test scripts the replies it needs and finds its own turns by id): start-ups are most of
# a browser test's time.
@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as api:
        yield api


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, fake: FakeAnthropic) -> Iterator[Console]:
    env = {"ANTHROPIC_API_KEY": "k", "REVERIE_ANTHROPIC_BASE_URL": fake.url}
    running = start_console(tmp_path_factory.mktemp("web-chat"), CONFIG, env)
    try:
        yield running
    finally:
        running.daemon.stop()


@pytest.fixture(scope="module")
def browser(console: Console) -> Iterator[Browser]:
    with open_browser(console) as b:
        yield b


def _chat(browser: Browser) -> Any:
    driver = browser.driver
    browser.open("/chat")
    wait_live(driver)
    wait_for(driver, lambda d: d.find_element("id", "chat-input").is_enabled(), "chat input")
    return driver


def _send(driver: Any, text: str) -> str:
    """Send `text` from the page; return its turn id once the page shows it as sent."""
    before = len(driver.find_elements("css selector", ".msg.person"))
    driver.find_element("id", "chat-input").send_keys(text)
    driver.find_element("id", "chat-send").click()
    mine = wait_for(
        driver,
        lambda d: [
            e
            for e in d.find_elements("css selector", ".msg.person")[before:]
            if e.get_attribute("data-state") == "sent"
        ],
        "the message to show as sent",
    )[0]
    return str(mine.get_attribute("data-turn"))


def _turn_done(driver: Any, turn_id: str) -> Any:
    agent = f".msg.agent[data-turn='{turn_id}']"
    from selenium.common.exceptions import StaleElementReferenceException

    def done(d: Any) -> bool:
        try:
            return bool(d.find_element("css selector", agent).get_attribute("data-done") == "1")
        except StaleElementReferenceException:
            return False  # replaced by the page's live part while read: the next poll reads it

    wait_for(driver, done, f"turn {turn_id} to finish", timeout=30)
    return driver.find_element("css selector", agent)


def _transcript_text(home: Path) -> str:
    return "".join(p.read_text() for p in sorted((home / "sessions" / "trunk").glob("*.jsonl")))


def test_log_in_see_the_state_send_a_message_and_watch_the_reply_stream(
    browser: Browser, fake: FakeAnthropic
) -> None:
    fake.enqueue(Planned.reply(REPLY, chunk_delay_s=0.08))
    driver = browser.driver
    # Logged in through the one-time link: the layout shows the daemon's state.
    badge = driver.find_element("id", "state-text")
    assert badge.text.startswith("awake")
    driver = _chat(browser)
    browser.screenshot("chat-empty")
    said = "Tell me about <b>herons</b>."
    turn_id = _send(driver, said)
    # Shown as sent only once acknowledged: it is on disk by then.
    home = browser.console.home
    assert said in (home / "inbox.jsonl").read_text() + _transcript_text(home)
    agent = f".msg.agent[data-turn='{turn_id}']"
    # Part of the reply is on the page while the rest is still coming.
    partial = wait_for(
        driver,
        lambda d: [
            e.text
            for e in d.find_elements("css selector", agent)
            if e.text and e.get_attribute("data-done") != "1"
        ],
        "part of the reply to stream in",
    )[0]
    assert REPLY.startswith(partial.strip()) and len(partial.strip()) < len(REPLY)
    assert _turn_done(driver, turn_id).find_element("css selector", ".body").text == REPLY
    browser.screenshot("chat-reply")
    # Opened again, the page shows the session's last turns, as text (never as markup).
    driver = _chat(browser)
    mine = driver.find_element("css selector", f".msg.person[data-turn='{turn_id}']")
    assert mine.text == said
    assert not mine.find_elements("css selector", "b")
    assert driver.find_element("css selector", agent + " .body").text == REPLY


def _question(driver: Any, turn_id: str) -> Any:
    return wait_for(
        driver,
        lambda d: d.find_elements("css selector", f".msg.agent[data-turn='{turn_id}'] .approval"),
        f"turn {turn_id}'s question",
    )[0]


def _answer(driver: Any, turn_id: str, decision: str) -> None:
    card = _question(driver, turn_id)
    card.find_element("css selector", f"button[data-decision='{decision}']").click()
    wait_for(
        driver,
        lambda d: _question(d, turn_id).get_attribute("data-answer") == decision,
        f"the question to be settled as {decision}",
    )


def test_an_approval_is_answered_in_place_and_the_call_runs(
    browser: Browser, fake: FakeAnthropic
) -> None:
    fake.enqueue(
        Planned.tool("write_file", {"path": "notes.md", "content": "heron count: 7\n"}),
        Planned.reply("Written."),
        Planned.tool("write_file", {"path": "other.md", "content": "no\n"}),
        Planned.reply("Not written, as you said."),
    )
    driver = _chat(browser)
    wrote = _send(driver, "Write the heron count to notes.md.")
    card = _question(driver, wrote)
    assert "write_file" in card.text and "+heron count: 7" in card.text
    browser.screenshot("chat-approval")
    _answer(driver, wrote, "yes")
    turn = _turn_done(driver, wrote)
    assert "Written." in turn.text
    tool = turn.find_element("css selector", "li[data-tool='write_file']")
    assert tool.get_attribute("class") == "done", tool.get_attribute("outerHTML")
    workspace = browser.console.home / "workspace"
    assert (workspace / "notes.md").read_text() == "heron count: 7\n"
    # Deny: the call does not run.
    declined = _send(driver, "Now write other.md.")
    _answer(driver, declined, "no")
    turn = _turn_done(driver, declined)
    assert "Not written" in turn.text
    assert (
        turn.find_element("css selector", "li[data-tool='write_file']").get_attribute("class")
        == "failed"
    )
    assert not (workspace / "other.md").exists()
    browser.screenshot("chat-approval-answered")
    # Opened again, each turn still shows its tool calls: done, and refused.
    driver = _chat(browser)
    for turn_id, status, what in ((wrote, "done", "notes.md"), (declined, "failed", "other.md")):
        line = driver.find_element(
            "css selector", f".msg.agent[data-turn='{turn_id}'] li[data-tool='write_file']"
        )
        assert line.get_attribute("class") == status, line.get_attribute("outerHTML")
        assert line.text == f"write_file — write_file: {what}"
    browser.screenshot("chat-tools-after-reload")
    records = [
        json.loads(line)
        for line in _transcript_text(browser.console.home).splitlines()
        if '"approval"' in line
    ]
    assert [
        (r["tool"], r["decision"], r["by"]) for r in records if r.get("type") == "approval"
    ] == [
        ("write_file", "yes", "person"),
        ("write_file", "no", "person"),
    ]


def _shown(driver: Any, css: str) -> str:
    """The text of the first element matching `css` now; "" when there is none or the page's
    live part replaced it while it was read (the next poll reads the new one)."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        found = driver.find_elements("css selector", css)
        return str(found[0].text) if found else ""
    except StaleElementReferenceException:
        return ""


def test_a_page_opened_mid_turn_shows_its_steps_then_its_reply(
    browser: Browser, fake: FakeAnthropic
) -> None:
    slow = " ".join(["slowly"] * 50)
    # The reply is held after its fifth word until the page opened mid-turn has been read: the
    # turn is still running then however slow the machine (it once ended first, and the node
    # read was replaced by the ended turn's: a stale element).
    fake.enqueue(Planned.tool("list_files", {}), Planned.reply(slow, hold_after_deltas=5))
    driver = _chat(browser)
    turn_id = _send(driver, "List the files, then talk slowly.")
    agent = f".msg.agent[data-turn='{turn_id}']"
    wait_for(
        driver, lambda d: _shown(d, agent + " .body").startswith("slowly"), "the reply to begin"
    )
    # Opened again while the reply streams: the step taken so far, no "interrupted", no end yet.
    driver = _chat(browser)
    node = driver.find_element("css selector", agent)
    assert node.get_attribute("data-done") is None and "interrupted" not in node.text
    assert "being answered" in node.find_element("css selector", ".meta").text
    step = node.find_element("css selector", "li[data-tool='list_files']")
    shown = step.text
    assert step.get_attribute("class") == "done" and shown.startswith("list_files")
    browser.screenshot("chat-reload-mid-turn")
    fake.release()
    # Its frames go to the page that sent it; this page shows the turn once it has ended.
    turn = _turn_done(driver, turn_id)
    assert turn.find_element("css selector", ".body").text == slow
    assert turn.find_element("css selector", "li[data-tool='list_files']").text == shown
    assert not turn.find_elements("css selector", ".meta")
    assert not driver.find_element("id", "chat-stop").is_displayed()


def test_stop_cancels_the_turn_being_answered(browser: Browser, fake: FakeAnthropic) -> None:
    fake.enqueue(Planned.reply(" ".join(["slowly"] * 200), chunk_delay_s=0.1))
    driver = _chat(browser)
    turn_id = _send(driver, "Say slowly, many times over.")
    agent = f".msg.agent[data-turn='{turn_id}']"
    wait_for(driver, lambda d: d.find_element("css selector", agent).text, "the reply to begin")
    stop = driver.find_element("id", "chat-stop")
    assert stop.is_displayed()
    stop.click()
    turn = _turn_done(driver, turn_id)
    assert "failed" in turn.get_attribute("class")
    assert "cancel" in turn.find_element("css selector", ".meta").text
    assert len(turn.find_element("css selector", ".body").text.split()) < 200
    wait_for(driver, lambda d: not d.find_element("id", "chat-stop").is_displayed(), "Stop to go")


def test_a_notice_waiting_opens_the_chat_and_counts_as_seen(browser: Browser) -> None:
    home = browser.console.home

    async def post() -> str:
        from daemon.bus import EventBus
        from daemon.clock import SystemClock
        from daemon.schedule.outbox import Outbox
        from daemon.store.db import Database

        async with await Database.open(home / "reverie.db") as db:
            outbox = Outbox(db, bus=EventBus("test"), clock=SystemClock())
            notice = await outbox.post(kind="reminder", text="Call the plumber.", key="t-1")
            return notice.id

    notice_id = anyio.run(post)
    driver = _chat(browser)
    shown = wait_for(
        driver,
        lambda d: d.find_elements("css selector", f".msg.notice[data-notice='{notice_id}']"),
        "the notice to open the chat",
    )[0]
    assert shown.text == "Call the plumber."

    def delivered() -> bool:
        with sqlite3.connect(f"file:{home / 'reverie.db'}?mode=ro", uri=True) as conn:
            row = conn.execute(
                "SELECT delivered_at FROM notices WHERE id = ?", (notice_id,)
            ).fetchone()
        return row is not None and row[0] is not None

    wait_for(driver, lambda d: delivered(), "the notice to count as seen")


def test_the_state_badge_follows_a_sleep_live(browser: Browser) -> None:
    driver = _chat(browser)
    driver.execute_script(
        "window.seen = []; Reverie.live.on('state', function (d) { window.seen.push(d.state); });"
    )
    with Client(browser.console.daemon.socket_path, timeout=30) as c:
        c.hello()
        started = c.command("sleep")
        assert started["type"] == "result", started
    wait_for(
        driver,
        lambda d: (
            "asleep" in d.execute_script("return window.seen")
            and d.execute_script("return window.seen").count("awake") >= 1
        ),
        "the badge to follow the sleep and the waking",
        timeout=60,
    )
    assert driver.find_element("id", "state-text").text.startswith("awake")
    assert "state-awake" in driver.find_element("id", "state-badge").get_attribute("class")


def test_the_login_page_and_a_used_link(console: Console, tmp_path: Path) -> None:
    missing = chromium_missing()
    if missing:
        pytest.skip(f"browser tests need Chromium: {missing}")
    driver = start_browser(tmp_path / "profile")
    try:
        link = console.login_link()
        driver.get(link)
        wait_for(driver, lambda d: "/login" not in d.current_url, "the link to log in")
        wait_live(driver)
        driver.delete_all_cookies()
        driver.get(link)
        error = driver.find_element("css selector", ".error")
        assert "used already" in error.text
        screenshot(driver, "login-used-link")
        token = (console.home / "web.token").read_text().strip()
        driver.find_element("id", "token").send_keys(token)
        driver.find_element("css selector", "form button[type='submit']").click()
        wait_for(driver, lambda d: "/login" not in d.current_url, "the token to log in")
        wait_live(driver)
        driver.get(console.base_url + "/login")
        screenshot(driver, "login")
    finally:
        driver.quit()


def test_a_forks_progress_shows_in_the_turn_as_it_happens(tmp_path: Path) -> None:
    console = start_console(tmp_path)  # the offline model delegates when asked to
    try:
        with open_browser(console) as browser:
            driver = _chat(browser)
            # What the fork's line looked like at each change, to see it running before done.
            driver.execute_script(
                "window.forkSeen = [];"
                "new MutationObserver(function () {"
                "  var li = document.querySelector(\"li[data-tool='fork']\");"
                "  if (li) window.forkSeen.push(li.className);"
                "}).observe(document.getElementById('chat-log'),"
                "  {subtree: true, childList: true, attributes: true, characterData: true});"
            )
            _send(driver, "Please delegate: find what we know about the kiln")
            wait_for(
                driver,
                lambda d: d.find_elements("css selector", ".msg.agent[data-done='1']"),
                "the turn to finish",
                timeout=60,
            )
            fork = driver.find_element("css selector", ".msg.agent li[data-tool='fork']")
            assert fork.get_attribute("class") == "done", fork.get_attribute("outerHTML")
            assert fork.text.startswith("fork fork-") and "complete" in fork.text
            assert driver.execute_script("return window.forkSeen")[0] == "running"
            inner = driver.find_elements("css selector", ".msg.agent li[data-fork]")
            names = {li.get_attribute("data-tool") for li in inner}
            assert {"fork", "task_complete"} <= names, names
            nested = [li for li in inner if li.get_attribute("data-tool") == "task_complete"]
            assert nested and nested[0].get_attribute("style").startswith("padding-left: 1.2rem")
            browser.screenshot("chat-fork")
            live = [
                (li.get_attribute("data-tool"), li.get_attribute("class"), li.text)
                for li in driver.find_elements("css selector", ".msg.agent li")
            ]
            # Opened again: the same lines, read from the transcripts and the fork lineage.
            driver = _chat(browser)
            again = driver.find_elements("css selector", ".msg.agent li")
            assert [
                (li.get_attribute("data-tool"), li.get_attribute("class"), li.text) for li in again
            ] == live
            fork = driver.find_element("css selector", ".msg.agent li[data-tool='fork']")
            assert fork.get_attribute("style").startswith("padding-left: 1.2rem")
            browser.screenshot("chat-fork-after-reload")
    finally:
        console.daemon.stop()


def test_a_page_left_for_another_closes_its_stream(browser: Browser) -> None:
    driver = _chat(browser)

    def pages_open() -> int:
        with Client(browser.console.daemon.socket_path, timeout=10) as c:
            c.hello()
            return int(c.command("status")["data"]["web"]["pages_open"])

    wait_for(driver, lambda d: pages_open() == 1, "this page's stream alone to be open")
    driver.get(browser.base_url + "/login")  # kept in the back-forward cache, stream closed
    wait_for(driver, lambda d: pages_open() == 0, "the left page's stream to close")
    driver.back()
    wait_for(driver, lambda d: pages_open() == 1, "the page's stream to reopen on return")
