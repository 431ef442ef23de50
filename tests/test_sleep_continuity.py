"""Continuity, end to end through the real daemon and the offline model: five days of talk, facts
told with "remember" and facts said only in passing, a sleep each night; afterwards the context
assembled for a question about any of them (`reverie context --prompt`) holds every remembered
fact and at least 90% of the ones said in passing, within the default budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.harness import REPO, Client, DaemonProcess, daemon_env

# About 25-60 s (five real sleeps and twenty `reverie context` processes): in the default run,
# because it is the check that the whole sleep cycle keeps what the person said.

# Per day: (told with "remember", question, the answer's words) and (said in passing, question, answer).
DAYS: list[dict[str, list[tuple[str, str, str]]]] = [
    {
        "remember": [
            ("remember that my dog is called Pepper", "what is my dog called?", "Pepper"),
            (
                "remember that the boiler service is booked for the ninth of April",
                "when is the boiler service?",
                "ninth of April",
            ),
        ],
        "passing": [
            (
                "Long day. My sister Ada moved to Lisbon last week, so the family dinner moves too.",
                "where did my sister Ada move?",
                "Lisbon",
            ),
            (
                "The car failed its inspection because of a cracked windscreen, annoying.",
                "why did the car fail its inspection?",
                "cracked windscreen",
            ),
        ],
    },
    {
        "remember": [
            (
                "remember that my passport expires in October 2027",
                "when does my passport expire?",
                "October 2027",
            ),
            ("remember that Marta's wedding is in Braga", "where is Marta's wedding?", "Braga"),
        ],
        "passing": [
            (
                "I started learning the cello with a teacher called Mrs Hollis, it is hard.",
                "who teaches me the cello?",
                "Hollis",
            ),
            (
                "Our neighbour's cat, Biscuit, keeps sleeping in our shed.",
                "what is the neighbour's cat called?",
                "Biscuit",
            ),
        ],
    },
    {
        "remember": [
            (
                "remember that the wifi password at the cabin is heron-tide",
                "what is the cabin wifi password?",
                "heron-tide",
            ),
            (
                "remember that I take my coffee with oat milk",
                "how do I take my coffee?",
                "oat milk",
            ),
        ],
        "passing": [
            (
                "By the way the plumber, Mr Okafor, fixed the leak under the sink on Monday.",
                "which plumber fixed the leak under the sink?",
                "Okafor",
            ),
            (
                "Tomas finally paid back the forty euros he owed me.",
                "how much did Tomas owe me?",
                "forty euros",
            ),
        ],
    },
    {
        "remember": [
            (
                "remember that the allotment plot number is 31",
                "what is the allotment plot number?",
                "31",
            ),
            ("remember that Joana is allergic to peanuts", "what is Joana allergic to?", "peanuts"),
        ],
        "passing": [
            (
                "The bakery on Rua Augusta now opens at seven, which helps a lot.",
                "when does the bakery on Rua Augusta open?",
                "seven",
            ),
            (
                "I switched my running route to the river path along the Tagus.",
                "where is my running route now?",
                "Tagus",
            ),
        ],
    },
    {
        "remember": [
            (
                "remember that the tax adviser is Helena Duarte",
                "who is my tax adviser?",
                "Helena Duarte",
            ),
            ("remember that the lease ends in November", "when does the lease end?", "November"),
        ],
        "passing": [
            (
                "My laptop's battery swelled up, so it went in for repair at the Almada shop.",
                "where did my laptop go for repair?",
                "Almada",
            ),
            (
                "We booked the holiday flat in Tavira for the first week of August.",
                "where is the holiday flat we booked?",
                "Tavira",
            ),
        ],
    },
]


def _cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", *args, "--home", str(home)],
        cwd=REPO,
        env=daemon_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_five_days_of_facts_survive_the_nights_into_the_context(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        with Client(d.socket_path) as c:
            c.hello()
            for day in DAYS:
                for text, _, _ in day["remember"] + day["passing"]:
                    _, frames = c.chat(text)
                    assert frames[-1]["type"] == "done", frames[-1]
                slept = _cli(home, "sleep", "--wait")
                assert slept.returncode == 0, slept.stderr
                assert "wake_up" in slept.stdout and "done" in slept.stdout
    finally:
        assert d.stop() == 0
    budget: int | None = None
    found: dict[str, list[bool]] = {"remember": [], "passing": []}
    misses: list[dict[str, Any]] = []
    for day in DAYS:
        for kind in ("remember", "passing"):
            for _, question, answer in day[kind]:
                out = _cli(home, "context", "--prompt", question, "--json")
                assert out.returncode == 0, out.stderr
                report = json.loads(out.stdout)
                budget = report["budget"]
                assert report["total_tokens"] <= budget
                text = "\n".join(block["text"] for block in report["blocks"])
                hit = answer.lower() in text.lower()
                found[kind].append(hit)
                if not hit:
                    misses.append({"question": question, "answer": answer, "kind": kind})
    assert budget == 8000  # the default budget
    assert all(found["remember"]), misses
    assert sum(found["passing"]) >= 0.9 * len(found["passing"]), misses
    # Five nights, five letters: the last one is from the fifth day.
    wake = (home / "WAKE.md").read_text()
    assert "Tavira" in wake and "Helena Duarte" in wake
