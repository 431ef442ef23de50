"""A fact is named by `fact:2` or by the bare `2` the person sees next to it: one parser
(`daemon.memory.ids.fact_uid`) wherever an id is taken. The command line's side runs through
the real daemon in `test_facts_daemon.py`; the console's through its real app and the model's
tools over a real store here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from daemon.memory.ids import fact_uid
from daemon.tools.registry import ToolContext, ToolRegistry
from tests.harness import Client
from tests.memory_support import memory_system
from tests.web_harness import start_console
from tests.web_pages_support import filled_console


@pytest.mark.parametrize(
    ("given", "uid"),
    [
        ("2", "fact:2"),
        (" fact:2 ", "fact:2"),
        ("[fact:12]", "fact:12"),
        ("Fact: 3", "fact:3"),
        ("#4", "fact:4"),
        ("007", "fact:7"),
        ("shared:3", "shared:3"),
        ("SHARED:03", "shared:3"),
        # Not an id: handed back as given (stripped), to be refused by name.
        ("fact:x", "fact:x"),
        ("2a", "2a"),
        ("fact:2:3", "fact:2:3"),
        ("profile:2", "profile:2"),
        ("²", "²"),
        ("  ", ""),
    ],
)
def test_fact_uid_reads_an_id_as_a_person_gives_it(given: str, uid: str) -> None:
    assert fact_uid(given) == uid


@pytest.mark.anyio
async def test_the_consoles_fact_forms_take_the_bare_number(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            facts = console.rig.memory.facts
            dentist = next(f for f in facts.facts() if f.text == "my dentist is Dr Vidal")
            log = console.rig.home.memory_dir / "facts.jsonl"
            token = await console.csrf()

            number = dentist.id.removeprefix("fact:")
            corrected = await console.client.post(
                "/memory/correct",
                data={"fact": number, "text": "my dentist is Dr Okafor", "csrf": token},
            )
            assert corrected.status_code == 200, corrected.text
            new = facts.current(dentist.id)
            assert new is not None and new.text == "my dentist is Dr Okafor"

            before = log.read_text()
            missing = await console.client.post(
                "/memory/retract", data={"fact": "999", "reason": "x", "csrf": token}
            )
            assert missing.status_code == 400 and "fact:999" in missing.text
            assert log.read_text() == before  # refused, nothing written

            retracted = await console.client.post(
                "/memory/retract",
                data={"fact": new.id.removeprefix("fact:"), "reason": "moved", "csrf": token},
            )
            assert retracted.status_code == 200 and f"{new.id} retracted" in retracted.text
            assert facts.get(new.id).retired_at is not None  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_the_models_correct_and_retract_take_the_bare_number(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        registry = ToolRegistry()
        for tool in memory.tools():
            registry.register(tool)
        ctx = ToolContext(session_id="s1", turn_id="t1")
        stored = await registry.call("remember", {"text": "the shed key is under the pot"}, ctx)
        assert not stored.is_error and "fact:1" in stored.content
        fixed = await registry.call(
            "correct", {"id": "1", "text": "the shed key is in the drawer"}, ctx
        )
        assert not fixed.is_error, fixed.content
        new = memory.facts.current("fact:1")
        assert new is not None and new.text == "the shed key is in the drawer"
        gone = await registry.call(
            "retract", {"id": new.id.removeprefix("fact:"), "reason": "lost"}, ctx
        )
        assert not gone.is_error and gone.content.startswith(f"{new.id} retracted"), gone.content
        assert memory.facts.get(new.id).retired_at is not None  # type: ignore[union-attr]


def test_through_the_daemons_console_a_fact_told_after_a_recall_is_the_persons_and_takes_its_number(
    tmp_path: Path,
) -> None:
    console = start_console(tmp_path)
    try:
        with Client(console.daemon.socket_path, timeout=60) as c:
            c.hello()
            for text in ("What do you recall about my kayak?", "Remember that my paddle is red."):
                _, frames = c.chat(text)
                assert frames[-1]["type"] == "done", frames[-1]
        with console.http() as http:
            http.get(console.signed_link())
            page = http.get("/memory")
            assert page.status_code == 200
            row = page.text[page.text.index('<tr class="fact') :]
            row = row[: row.index("</tr>")]
            fact = re.search(r'id="(fact:\d+)"', row)
            assert fact and "my paddle is red" in row, row
            # Listed as the person's word, though the turn before had read memory.
            assert "told, person" in row, row
            token = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert token
            number = fact.group(1).removeprefix("fact:")
            done = http.post(
                "/memory/correct",
                data={"fact": number, "text": "my paddle is blue", "csrf": token.group(1)},
            )
            assert done.status_code == 200, done.text
            assert f"{fact.group(1)} corrected as fact:" in done.text
        events = [
            json.loads(line)
            for line in (console.home / "memory" / "facts.jsonl").read_text().splitlines()
        ]
        (correction,) = [e for e in events if e["op"] == "correct"]
        assert correction["supersedes"] == fact.group(1) and correction["origin"] == "person"
    finally:
        assert console.daemon.stop() == 0
