"""Facts through the real daemon and the offline model: said in passing, told after a recall,
named by a bare id, recalled in plain sentences; and, on the same daemon, every command's
refusal of bad arguments."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.chat.protocol import COMMAND_ARGS
from tests.harness import Client, DaemonProcess, daemon_env, run_cli


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, "--home", str(home), timeout=120)


def test_a_fact_said_in_passing_is_mined_at_night_and_its_change_shown_after(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("Could you draft the agenda? The team offsite is in Bergen this year.")
            c.chat("Also, my partner Sam will join the dinner.")
        first = _cli(home, "sleep", "--wait")
        assert first.returncode == 0, first.stderr
        assert "mining" in first.stdout
        facts = json.loads(_cli(home, "memory", "facts", "--json").stdout)
        by_value = {f["value"]: f for f in facts if f["source"] == "mined"}
        assert by_value["Bergen"]["origin"] == "person" and by_value["Sam"]["origin"] == "person"
        bergen = by_value["Bergen"]
        assert bergen["session"] and bergen["message_ids"]
        with Client(d.socket_path) as c:
            c.hello()
            c.chat("Change of plan: the offsite moves from Bergen to Kotor.")
        second = _cli(home, "sleep", "--wait")
        assert second.returncode == 0, second.stderr
        history = _cli(home, "memory", "facts", "--history", bergen["id"])
        assert history.returncode == 0, history.stderr
        assert "The team offsite is in Bergen this year" in history.stdout
        assert "changed: superseded by" in history.stdout and "Kotor" in history.stdout
        shown = _cli(home, "context", "--prompt", "where is the offsite again?", "--text")
        assert shown.returncode == 0, shown.stderr
        assert "(changed from Bergen on " in shown.stdout
        assert f'id="{bergen["id"]}"' not in shown.stdout  # the old value never stands alone
    finally:
        assert d.stop() == 0


# One daemon for the tests below (each keeps to its own subject and finds its facts by text).
@pytest.fixture(scope="module")
def offline_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(home=tmp_path_factory.mktemp("facts") / "home", env=daemon_env()).start()
    try:
        yield d
    finally:
        assert d.stop() == 0


def _say(d: DaemonProcess, *texts: str) -> list[str]:
    replies = []
    with Client(d.socket_path, timeout=60) as c:
        c.hello()
        for text in texts:
            _, frames = c.chat(text)
            assert frames[-1]["type"] == "done", frames[-1]
            replies.append("".join(f.get("text", "") for f in frames if f["type"] == "delta"))
    return replies


def _fact(home: Path, text: str) -> dict[str, Any]:
    facts = json.loads(_cli(home, "memory", "facts", "--all", "--json").stdout)
    return next(f for f in facts if f["text"] == text)


def test_what_the_person_tells_after_a_recall_is_theirs_and_pinnable(
    offline_daemon: DaemonProcess,
) -> None:
    home = offline_daemon.home
    recalled, _ = _say(
        offline_daemon,
        "What do you recall about my kayak?",
        "Remember that my paddle is red.",
    )
    assert "found nothing in memory" in recalled  # the turn before read memory
    paddle = _fact(home, "my paddle is red")
    assert paddle["origin"] == "person", paddle
    listed = _cli(home, "memory", "facts").stdout.splitlines()
    row = next(i for i, line in enumerate(listed) if line.endswith("my paddle is red"))
    assert listed[row + 1].strip().startswith("(told, person")
    pinned = _cli(home, "remember", "--pin", paddle["id"])
    assert pinned.returncode == 0, pinned.stderr
    assert f"[{paddle['id']}] my paddle is red _(person, " in (home / "FACTS.md").read_text()


def test_a_fact_is_named_by_its_bare_number_everywhere_on_the_command_line(
    offline_daemon: DaemonProcess,
) -> None:
    home = offline_daemon.home
    _say(
        offline_daemon,
        "Remember that my locker is number 12.",
        "Remember that the gym shuts at nine.",
    )
    locker = _fact(home, "my locker is number 12")
    gym = _fact(home, "the gym shuts at nine")
    n, m = locker["id"].removeprefix("fact:"), gym["id"].removeprefix("fact:")

    corrected = _cli(home, "remember", "--correct", n, "my locker is number 14")
    assert corrected.returncode == 0, corrected.stderr
    history = _cli(home, "memory", "facts", "--history", n)
    assert history.returncode == 0, history.stderr
    assert f"history of {locker['id']} (2 value(s)" in history.stdout
    assert "my locker is number 14" in history.stdout
    retracted = _cli(home, "remember", "--retract", f"[fact:{m}]", "--reason", "moved gyms")
    assert retracted.returncode == 0, retracted.stderr
    assert f"{gym['id']} retracted" in retracted.stdout
    restored = _cli(home, "remember", "--restore", m)
    assert restored.returncode == 0 and f"{gym['id']} restored" in restored.stdout
    pinned = _cli(home, "remember", "--pin", m)
    assert pinned.returncode == 0 and f"{gym['id']} pinned in FACTS.md" in pinned.stdout
    # The socket command (any client) reads the id the same way.
    with Client(offline_daemon.socket_path, timeout=60) as c:
        c.hello()
        done = c.command("remember", {"retract": m, "reason": "closed for good"})
    assert done["type"] == "result" and done["data"]["message"] == f"{gym['id']} retracted"
    # A number that names no fact is refused by name, and nothing is written.
    before = (home / "memory" / "facts.jsonl").read_text()
    missing = _cli(home, "remember", "--correct", "999", "whatever")
    assert missing.returncode != 0 and "no fact with id 'fact:999'" in missing.stderr
    assert (home / "memory" / "facts.jsonl").read_text() == before
    # Without a daemon (the direct path) the same bare number works.
    alone = home.parent / "alone"
    assert _cli(alone, "remember", "my bike is blue").returncode == 0
    direct = _cli(alone, "remember", "--correct", "1", "my bike is black")
    assert direct.returncode == 0, direct.stderr
    assert "my bike is black" in _cli(alone, "memory", "facts", "--history", "1").stdout


def test_an_offline_recall_answers_in_plain_sentences_with_the_sources_at_the_end(
    offline_daemon: DaemonProcess,
) -> None:
    home = offline_daemon.home
    # A session of its own (the tests before talked of other things in theirs).
    assert _cli(home, "sleep", "--wait").returncode == 0
    _say(
        offline_daemon,
        "Remember that I keep bees and the honey harvest is in August.",
        "The jars from the spring harvest taste of lime blossom. I sell honey at the Saturday market.",
    )
    done = _cli(home, "sleep", "--wait")  # the day's session summarised, as after a night
    assert done.returncode == 0, done.stderr
    (answer,) = _say(offline_daemon, "What do you recall about honey?")
    body, _, rest = answer.partition("\n\nSources: ")
    honey = _fact(home, "I keep bees and the honey harvest is in August")
    # The best fact first, in plain words; what was said in passing after it.
    assert body.startswith("You told me: “I keep bees and the honey harvest is in August.”")
    assert "I sell honey at the Saturday market." in body, answer
    # No wall of ids: no message ids, times, session slugs or fact ids in the sentences.
    assert not re.search(r"turn-|trunk-|\d{2}:\d{2}|session-|fact:|\[", body), body
    sources, _, honest = rest.partition("\n")
    assert sources.startswith(f"{honey['id']}, session ")
    assert re.fullmatch(r"fact:\d+, session \d{1,2} [A-Z][a-z]{2} \d{4} \([a-z0-9-]+\)\.", sources)
    assert "offline model" in honest


# Each command's request class refuses bad arguments before its handler runs: the client gets
# `bad_args` with a sentence naming what is wrong, and nothing is written, started or switched.
# (The parse of each class is unit-tested in tests/test_command_requests.py.)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("memory_search", {}, "memory_search needs 'queries': a list of strings"),
    ("memory_search", {"queries": ["x"], "k": 0}, "k must be a positive number"),
    (
        "memory_search",
        {"queries": ["x"], "mode": "fuzzy"},
        "unknown search mode 'fuzzy'; use hybrid, lexical or vector",
    ),
    (
        "memory_import",
        {"summarise": "yes"},
        "memory_import: 'summarise' must be a boolean, got a string",
    ),
    ("remember", {}, "remember needs TEXT (or --retract ID)"),
    (
        "remember",
        {"retract": "1", "text": "my paddle is blue"},
        "--retract takes no TEXT; give the reason with --reason",
    ),
    ("remember", {"pin": "1", "text": "my paddle is blue"}, "--pin takes no TEXT"),
    ("recall", {"query": "   "}, "recall needs a non-empty 'query'"),
    ("sleep", {"wait": "yes"}, "sleep: 'wait' must be a boolean, got a string"),
    ("switch", {"reason": 5}, "switch: 'reason' must be a string, got a number"),
    ("journal", {"tail": 0}, "--tail must be between 1 and 10000, got 0"),
    (
        "journal",
        {"day": "someday"},
        "--day 'someday' is not a date (expected YYYY-MM-DD, 'today' or 'yesterday')",
    ),
    (
        "schedule",
        {"action": "snooze"},
        "unknown schedule action 'snooze' (one of list, add, cancel, approve, decline)",
    ),
    ("schedule", {"action": "add", "words": "tomorrow tea"}, "words must be a list of strings"),
    ("schedule", {"action": "add", "when": "at 9"}, "say when (a string) and the text (a string)"),
]


def test_every_command_refuses_bad_args_with_its_sentence(offline_daemon: DaemonProcess) -> None:
    facts = offline_daemon.home / "memory" / "facts.jsonl"
    facts_before = facts.read_bytes() if facts.exists() else b""
    with Client(offline_daemon.socket_path, timeout=60) as c:
        c.hello()
        before = c.command("status", {"verbose": True})  # arguments it does not take: ignored
        assert before["type"] == "result", before
        listed = c.command("schedule", {"action": "list", "all": True})["data"]["schedules"]
        for name, args, message in REFUSED:
            refused = c.command(name, args)
            assert (refused["type"], refused["code"], refused["message"]) == (
                "error",
                "bad_args",
                message,
            ), (name, args, refused)
        after = c.command("status")["data"]
        # The daemon answers exactly the commands the protocol describes (each of which has
        # its request class: tests/test_command_requests.py).
        unknown = c.command("nap", {})
        assert unknown["code"] == "unknown_command", unknown
        assert set(unknown["message"].split("known: ")[1].split(", ")) == set(COMMAND_ARGS)
        assert c.command("ping", {"x": 1})["data"] == {"pong": True, "state": "awake"}
        assert c.command("schedule", {"action": "list", "all": True})["data"]["schedules"] == listed
    assert after["trunk"]["session_id"] == before["data"]["trunk"]["session_id"]
    assert after["state"] == "awake" and (after["sleep"] or {}).get("running") is None
    assert (facts.read_bytes() if facts.exists() else b"") == facts_before
