"""A correction reaches everywhere the old value shows: summaries, months, recall, WAKE.md.

Through the real daemon (offline model): a fact told, a day's talk summarised that states it,
the fact corrected with `reverie remember --correct`; then `reverie recall` and `reverie
context` show the old value only with its correction, and the next WAKE.md too. The marking
rule itself (`daemon.memory.corrections`) is checked in-process.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from daemon.context.layers import CUT_MARKER, cut_at_sentence, sentences
from daemon.memory.api import MemoryItem
from daemon.memory.corrections import Correction, Corrections, with_notes
from daemon.schedule.greeting import MorningGreeting
from daemon.schedule.outbox import Outbox
from tests.harness import Client, DaemonProcess, daemon_env, run_cli
from tests.sleep_phase_support import START, sleep_home

NOTE = re.compile(
    r"\[corrected (\d{4}-\d{2}-\d{2}): favourite tea is now rooibos, was earl grey\]", re.I
)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(*args, "--home", str(home), timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _say(d: DaemonProcess, *texts: str) -> None:
    with Client(d.socket_path, timeout=60) as c:
        c.hello()
        for text in texts:
            _, frames = c.chat(text)
            assert frames[-1]["type"] == "done", frames[-1]


def _never_alone(text: str) -> None:
    """Every line naming the old value names the new one too (its note, or the change); a
    block's opening tag keeps its title as written, the note is in the block's first line."""
    for line in text.splitlines():
        if line.startswith("<memory "):
            continue
        if re.search(r"\bearl grey\b", line, re.I):
            assert "rooibos" in line.lower(), f"the old value alone: {line!r}"


@pytest.mark.xfail(
    strict=False,
    reason="open bug, issue 34: in about one fresh-clone CI run in six under load, `reverie "
    "recall` quotes the day's summary with the old value and no correction note (the summary "
    "source came back unmarked); not reproduced alone, cause not found yet",
)
def test_a_correction_is_marked_in_recall_context_and_wake(tmp_path: Path) -> None:
    home = tmp_path / "home"
    d = DaemonProcess(home=home, env=daemon_env()).start()
    try:
        told = json.loads(_cli(home, "remember", "my favourite tea is earl grey", "--json").stdout)
        _say(d, "My favourite tea is earl grey; I drink a pot of it every morning before work.")
        _cli(home, "sleep", "--wait")  # the day's session summarised, as after a night
        summaries = list((home / "memory" / "sessions").glob("*.md"))
        assert any("earl grey" in p.read_text().lower() for p in summaries)

        _cli(home, "remember", "--correct", told["id"], "my favourite tea is rooibos")
        today = datetime.now(UTC).date()

        recalled = _cli(home, "recall", "favourite tea").stdout
        found = NOTE.search(recalled)
        assert found, recalled
        assert abs(datetime.fromisoformat(found.group(1)).date() - today) <= timedelta(days=1)
        as_json = json.loads(_cli(home, "recall", "favourite tea", "--json").stdout)
        assert NOTE.search(as_json["answer"])

        shown = _cli(home, "context", "--prompt", "favourite tea", "--text").stdout
        assert NOTE.search(shown), shown
        _never_alone(shown)

        # The next letter to itself: woven from the day that said the old value again.
        _say(d, "I finished the last of the earl grey tea this morning, my favourite tea then.")
        _cli(home, "sleep", "--wait")
        wake = (home / "WAKE.md").read_text()
        assert "earl grey" in wake.lower(), wake
        assert NOTE.search(wake), wake
        _never_alone(wake)
    finally:
        assert d.stop() == 0


def _summary(text: str, ts: datetime) -> MemoryItem:
    return MemoryItem(id="summary:s1", kind="summary", text=text, origin="person", ts=ts)


def test_the_old_value_is_marked_as_a_whole_word_of_its_subject_and_only_once() -> None:
    on = datetime(2026, 11, 28, 9, tzinfo=UTC)
    tea = Correction(old="earl grey", now="rooibos", what="favourite tea", on=on,
                     verb="corrected", anchors=frozenset({"favourite", "tea"}))  # fmt: skip
    marks = Corrections([tea])
    before = on - timedelta(days=3)
    text = (
        "We talked about her favourite tea: Earl Grey, strong.\n"
        "She baked an earl grey cake for the fair.\n"  # no word of the subject: another thing
        "The earl greyhound tea room closed.\n"  # not the value as a whole word
        "Her favourite tea is rooibos now, no longer earl grey."  # tells the change itself
    )
    [marked] = marks.items([_summary(text, before)])
    lines = marked.text.splitlines()
    assert lines[0].endswith(
        "strong. [corrected 2026-11-28: favourite tea is now rooibos, was earl grey]"
    )
    assert lines[1:] == text.splitlines()[1:]
    # Marking again adds nothing; a text written after the correction knew it.
    assert marks.mark(marked.text) == marked.text
    [later] = marks.items([_summary(text, on + timedelta(hours=1))])
    assert later.text == text
    # Facts are the current values: never marked.
    fact = MemoryItem(
        id="fact:1", kind="fact", text="my favourite tea is earl grey", origin="person"
    )
    assert marks.items([fact]) == [fact]
    # An answer drawn from a marked text carries its note, once.
    answer = with_notes("You said your favourite tea is Earl Grey.", [marked.text, marked.text])
    assert answer.count("[corrected 2026-11-28:") == 1


@pytest.mark.anyio
async def test_the_greeting_quotes_an_open_matter_with_its_correction(tmp_path: Path) -> None:
    """The greeting clips what WAKE.md says is open; the note is whole after the clip."""
    with anyio.fail_after(60):
        async with sleep_home(tmp_path / "home") as rig:
            told = await rig.memory.remember("my favourite tea is earl grey")
            rig.clock.set(START + timedelta(days=1))
            await rig.memory.facts.correct(told.id, "my favourite tea is rooibos", origin="person")
            rig.home.wake_file.write_text(
                "# Wake\n\n## Open threads\n"
                "- Order more earl grey, my favourite tea, before the shop on Rua Augusta closes "
                "for the holidays next week [corrected 2026-01-06: favourite tea is now rooibos, "
                "was earl grey]\n"
                "- Call the plumber about the boiler.\n"
            )
            outbox = Outbox(rig.db, bus=rig.bus, clock=rig.clock)
            greeting = MorningGreeting(
                home=rig.home, db=rig.db, outbox=outbox, zone=UTC, now=rig.clock.now
            )
            notice = await greeting.greet("s-2")
    [order] = [line for line in notice.text.splitlines() if "Order more" in line]
    assert order.endswith("[corrected 2026-01-06: favourite tea is now rooibos, was earl grey]")
    assert "Call the plumber about the boiler." in notice.text


def test_a_cut_to_fit_keeps_a_sentence_s_citation_and_its_line_s_correction_note() -> None:
    """A layer cut at a sentence (the last dream's reflection) keeps the bracketed citation and
    note after the sentence, splits no sentence at a full stop inside a note, and a cut in the
    middle of a line still carries the note that stands at the line's end."""
    note = "[corrected 2026-11-28: favourite tea is now rooibos from St. Ives, was earl grey]"
    body = (
        f"What happened:\n- The person drinks earl grey. [summary:s1] {note}\n"
        f"- my favourite tea is earl grey [fact:1] {note}\n"
        f"- Her tea is earl grey. She drinks a pot every morning before work. {note}\n"
        "- The boiler was fixed on Tuesday. The plumber came at nine."
    )
    assert f"- The person drinks earl grey. [summary:s1] {note}\n" in sentences(body)
    assert all(p.count("[") == p.count("]") for p in sentences(body))

    def words(text: str) -> int:
        return len(text.split())

    for budget in range(words(CUT_MARKER) + 3, words(body)):
        cut = cut_at_sentence(body, budget, words)
        if cut is None:
            continue
        assert words(cut) <= budget
        for line in cut.splitlines():
            if "earl grey" in line:
                assert note in line, (budget, line)
