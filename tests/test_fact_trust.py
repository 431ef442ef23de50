"""The one trust rule of facts (`daemon.memory.fact_trust`), and every write path asking it.

The rule's table is checked on its own; then each path — remember, correct, retract, restore,
reinstate, pin, mining, the log's replay of a pin — is driven on a real memory system (SQLite
file, fsynced log) with a word the rule refuses, and must refuse it and write nothing. A path
that stops asking the rule fails its test here.
"""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest

from daemon.memory.fact_log import Fact, FactLog
from daemon.memory.fact_trust import ORIGINS, allows, refusal
from daemon.memory.facts import FactError
from daemon.memory.mining import MinedFact
from tests.memory_support import NOW, memory_system

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent


def fact(origin: str, target: str = "memory", uid: str = "fact:1") -> Fact:
    return Fact(id=uid, target=target, text="x", wording="x", origin=origin, created_at=NOW)  # type: ignore[arg-type]


def lines(root: Path) -> int:
    path = root / "memory" / "facts.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


# ----- the rule itself --------------------------------------------------------------------------
def test_the_profile_takes_no_untrusted_text_and_the_log_takes_anyones() -> None:
    for origin in ORIGINS:
        assert allows("add", origin, target="memory")
        assert allows("add", origin, target="profile") == (origin not in ("tool", "import"))
    assert "cannot go into the profile" in (refusal("add", "tool", target="profile") or "")


def test_a_fact_is_superseded_only_by_a_word_at_least_as_trusted() -> None:
    may = {
        (old, new)
        for old in ("person", "agent", "system", "tool", "import")
        for new in ORIGINS
        if allows("supersede", new, fact=fact(old))
    }
    assert {new for old, new in may if old == "person"} == {"person"}
    assert {new for old, new in may if old == "agent"} == {"person", "agent", "system"}
    assert {new for old, new in may if old == "tool"} == set(ORIGINS)
    # Never untrusted text over a profile fact, whatever that fact's own origin.
    assert not allows("supersede", "tool", fact=fact("tool", "profile"))
    assert "does not change" in (refusal("supersede", "agent", fact=fact("person")) or "")


def test_an_amendment_by_id_is_refused_only_to_untrusted_text_on_the_profile() -> None:
    for origin in ORIGINS:
        assert allows("amend", origin, fact=fact("person"))
        assert allows("amend", origin, fact=fact("person", "profile")) == (
            origin not in ("tool", "import")
        )


def test_only_the_person_pins_and_never_untrusted_text() -> None:
    assert [o for o in ORIGINS if allows("pin", o)] == ["person"]
    assert allows("pin", "person", fact=fact("agent"))
    assert "never pinned" in (refusal("pin", "person", fact=fact("import")) or "")


def test_no_fact_module_judges_an_origin_but_the_rule() -> None:
    """The fact modules ask `fact_trust`; none reads the untrusted set or a rank itself."""
    for path in sorted((ROOT / "daemon" / "memory").glob("fact*.py")):
        if path.name == "fact_trust.py":
            continue
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {
            a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)
            for a in n.names
        }  # fmt: skip
        assert not names & {"UNTRUSTED_ORIGINS", "RANK", "_TRUST"}, path.name


# ----- each path asks it ------------------------------------------------------------------------
async def test_remember_asks_the_rule_to_add_change_and_keep(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        with pytest.raises(FactError, match="cannot go into the profile"):
            await memory.remember("The user is an administrator", target="profile", origin="tool")
        lock = await memory.remember("the bike lock combination is 163", origin="person")
        before = lines(tmp_path)
        # The agent's word gives the person's fact no new value ...
        agent = await memory.remember("the bike lock combination is now 999", origin="agent")
        assert (agent.status, agent.id) == (
            "similar",
            lock.id,
        ) and "does not change" in agent.message
        assert lines(tmp_path) == before
        # ... the person's own does.
        person = await memory.remember("the bike lock combination is now 999", origin="person")
        assert person.status == "corrected" and person.similar_to == lock.id
        # A fact sleep mined from the person is kept as told only on a word as trusted.
        mined = await memory.facts.record_mined(
            MinedFact(text="My locker code is 4411.", kind="fact", origin="person",
                      session="d1", message_ids=("d1-m0",), said_at=NOW)
        )  # fmt: skip
        before = lines(tmp_path)
        by_agent = await memory.remember("My locker code is 4411.", origin="agent")
        assert (by_agent.status, by_agent.id) == ("duplicate", mined.id)
        assert lines(tmp_path) == before
        by_person = await memory.remember("My locker code is 4411.", origin="person")
        assert by_person.status == "stored" and f"in place of {mined.id}" in by_person.message


async def test_correct_asks_the_rule(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        own = await memory.remember("I am vegetarian", target="profile", origin="person")
        before = lines(tmp_path)
        with pytest.raises(FactError, match="cannot change the profile"):
            await memory.correct(own.id, "I eat meat", origin="import")
        assert lines(tmp_path) == before and memory.facts.get(own.id).active  # type: ignore[union-attr]


async def test_retract_asks_the_rule(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        own = await memory.remember("I am allergic to peanuts", target="profile")
        log = await memory.remember("The weather API said rain", origin="tool")
        before = lines(tmp_path)
        with pytest.raises(FactError, match="cannot change the profile"):
            await memory.retract(own.id, reason="the page says otherwise", origin="tool")
        assert lines(tmp_path) == before and memory.facts.get(own.id).active  # type: ignore[union-attr]
        await memory.retract(log.id, reason="it did not rain", origin="tool")  # the log: allowed
        assert not memory.facts.get(log.id).active  # type: ignore[union-attr]


async def test_restore_asks_the_rule(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        own = await memory.remember("I live in Bergen", target="profile")
        await memory.retract(own.id, reason="moved", origin="person")
        before = lines(tmp_path)
        with pytest.raises(FactError, match="cannot change the profile"):
            await memory.facts.restore(own.id, origin="import")
        assert lines(tmp_path) == before and not memory.facts.get(own.id).active  # type: ignore[union-attr]
        assert (await memory.facts.restore(own.id, origin="system")).active


async def test_reinstate_asks_the_rule(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        old = await memory.remember("My doctor is Dr Berg", target="profile")
        new = await memory.correct(old.id, "My doctor is Dr Lee", origin="person")
        before = lines(tmp_path)
        with pytest.raises(FactError, match="cannot change the profile"):
            await memory.facts.reinstate(old.id, origin="tool")
        assert lines(tmp_path) == before and memory.facts.get(new.id).active  # type: ignore[union-attr]
        back = await memory.facts.reinstate(old.id, origin="person")
        assert back.active and not memory.facts.get(new.id).active  # type: ignore[union-attr]
        row = await memory.index.get(old.id)
        assert row is not None and not row.meta.get("retired_at")


async def test_pin_asks_the_rule(tmp_path: Path) -> None:
    async with memory_system(tmp_path) as memory:
        own = await memory.remember("I drink green tea at four", origin="agent")
        page = await memory.remember("The shop opens at nine", origin="tool")
        before = lines(tmp_path)
        with pytest.raises(FactError, match="only the person"):
            await memory.facts.pin(own.id, origin="agent")
        with pytest.raises(FactError, match="never pinned"):
            await memory.facts.pin(page.id, origin="person")
        assert lines(tmp_path) == before
        assert (await memory.facts.pin(own.id, origin="person")).pin_confirmed_at is not None


async def test_mining_asks_the_rule(tmp_path: Path) -> None:
    def said(value: str, origin: str, days: int) -> MinedFact:
        return MinedFact(
            text=f"My dentist is {value}.", kind="person", origin=origin, session=f"d{days}",
            message_ids=(f"d{days}-m0",), said_at=NOW + timedelta(days=days),
            subject="person", attribute="dentist", value=value,
        )  # fmt: skip

    async with memory_system(tmp_path) as memory:
        facts = memory.facts
        first = await facts.record_mined(said("Dr Berg", "person", 0))
        assert first.status == "stored"
        before = lines(tmp_path)
        for origin, day in (("tool", 1), ("import", 2), ("agent", 3)):
            left = await facts.record_mined(said("Dr Lee", origin, day))
            assert (left.status, left.id) == ("kept", first.id), origin
        assert lines(tmp_path) == before and facts.get(first.id).active  # type: ignore[union-attr]
        changed = await facts.record_mined(said("Dr Lee", "person", 4))
        assert (changed.status, changed.old_id) == ("superseded", first.id)


def test_the_replay_confirms_only_a_pin_the_rule_lets_pin(tmp_path: Path) -> None:
    """A pin line written by hand with another origin is read as a proposal, not a pin."""
    path = tmp_path / "facts.jsonl"
    writer = FactLog(path)
    ts = NOW.isoformat()
    writer.append({"v": 1, "op": "remember", "id": None, "ts": ts, "target": "memory",
                   "origin": "agent", "text": "I swim on Sundays"})  # fmt: skip
    writer.append({"v": 1, "op": "pin", "id": "fact:1", "ts": ts, "origin": "agent"})
    reader = FactLog(path)
    reader.refresh()
    fact = reader.facts["fact:1"]
    assert fact.pin_confirmed_at is None and fact.pin_proposed_at is not None
    writer.append({"v": 1, "op": "pin", "id": "fact:1", "ts": ts, "origin": "person"})
    reader.refresh()
    assert reader.facts["fact:1"].pin_confirmed_at is not None
