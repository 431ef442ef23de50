"""Each night's consolidation is a change set: recorded by a real cycle, shown and reverted by `reverie sleep`.

An in-process daemon (its own services, a `FakeClock`, the offline model) sleeps twice, forty
days apart; the second night mines a fact said in passing and a changed plan (superseding the
first night's), folds the first day into its month, retires a passed plan and promotes an
important fact. `reverie sleep list|show|revert`
then run as subprocesses against the home, and what memory shows (search, FACTS.md, the
planner's recent window, the facts log) is checked before and after each revert. A third
night shows that nothing reverted comes back by itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from daemon.memory.months import unfolded_summaries
from daemon.sleep.changes import ChangeError, list_changes
from daemon.sleep.maintenance import MaintenancePhase
from daemon.sleep.mine import MiningPhase
from daemon.sleep.revert import ChangeReverter
from daemon.sleep.wake import WakeUp
from tests.harness import REPO, daemon_env
from tests.sleep_support import START, rig, sleep_settings

NURSERY = "We decided to paint the nursery walls terracotta."
DENTIST = "Dentist appointment on 2026-03-04."
PASSPORT = "My passport number ends in 4471."
OFFSITE = "The team offsite is in Bergen this year, so book nothing that week."
MOVED = "Big news: the offsite moves from Bergen to Kotor."
SISTER = "My sister Ana is flying in on Friday."


def reverie(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon.cli", "--home", str(home), *args],
        cwd=REPO, env=daemon_env({"TZ": "UTC"}), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def ok(home: Path, *args: str) -> str:
    out = reverie(home, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def search_ids(home: Path, query: str) -> dict[str, str]:
    """Memory search's results for `query`: id → kind."""
    return {r["id"]: r["kind"] for r in json.loads(ok(home, "memory", "search", query, "--json"))}


def context_text(home: Path) -> str:
    """The context a turn would be given now, every layer."""
    report = json.loads(ok(home, "context", "--prompt", "hello", "--json"))
    return "\n".join(block["text"] for block in report["blocks"])


def facts_log(home: Path) -> list[dict[str, Any]]:
    lines = (home / "memory" / "facts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


NIGHT = lambda t: [MiningPhase(), MaintenancePhase(), WakeUp(t)]  # noqa: E731


async def two_nights(root: Path) -> dict[str, Any]:
    cfg = sleep_settings(fold_after_days=30, retire_after_days=7)
    async with rig(root, settings=cfg, phases=NIGHT) as r:
        await r.say(NURSERY)
        await r.say(OFFSITE)
        nursery_session = r.trunk.session.id  # type: ignore[union-attr]
        dentist = await r.memory.facts.remember(DENTIST, origin="person")
        first = await r.cycle.run("manual")
        # The first night mines what was said; nothing is old enough to fold or retire yet.
        assert set(first.changes) == {"fact_mined"}
        r.clock.advance(days=40)
        await r.say(MOVED)
        await r.say(SISTER)
        passport = await r.memory.facts.remember(PASSPORT, origin="person", tags=("important",))
        second = await r.cycle.run("nightly")
        return {
            "first": first.cycle_id,
            "second": second.cycle_id,
            "counts": second.changes,
            "nursery_session": nursery_session,
            "dentist": dentist.id,
            "passport": passport.id,
        }


async def third_night(root: Path) -> dict[str, Any]:
    """A night after the reverts; a session of March that was never summarised is summarised
    first, so the month the revert retired gains a source again."""
    cfg = sleep_settings(fold_after_days=30, retire_after_days=7)
    async with rig(root, settings=cfg, phases=NIGHT) as r:
        r.clock.set(START + timedelta(days=41))
        late = START + timedelta(days=3)
        await r.db.execute(
            "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, 'trunk', ?, ?)",
            ("march-late", str(r.home.trunk_dir / "march-late.jsonl"), late.isoformat()),
        )
        await r.db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?,?,?,?,?,?)",
            (
                "march-late",
                "march-late-m0",
                0,
                late.isoformat(),
                "user",
                "The boiler was serviced.",
            ),
        )
        await r.memory.index_session("march-late")
        await r.memory.summarise_session("march-late", wait=True)
        await r.db.execute(
            "UPDATE memories SET created_at = ? WHERE session_id = 'march-late'",
            (late.isoformat(),),
        )
        outcome = await r.cycle.run("nightly")
        summaries = await unfolded_summaries(r.db, 50)
        month = await r.memory.index.get("month:2026-03")
        folded = await r.rows(
            "SELECT source_uid FROM memory_folds WHERE month_uid = 'month:2026-03'"
        )
        return {
            "counts": outcome.changes,
            "recent": {s.session for s in summaries},
            "month_active": month is not None and not month.meta.get("retired_at"),
            "month_text": month.text if month else "",
            "folded": {uid for (uid,) in folded},
        }


@pytest.fixture
def slept(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    home = tmp_path / "home"
    night = anyio.run(two_nights, home)
    return home, night


def test_a_night_records_its_changes_and_each_revert_restores_what_memory_shows(
    slept: tuple[Path, dict[str, Any]],
) -> None:
    home, night = slept
    cycle = night["second"]
    assert night["counts"] == {
        "fact_mined": 1,
        "fact_superseded": 1,
        "month_folded": 1,
        "fact_retired": 1,
        "fact_promoted": 1,
    }

    # `sleep list`: both cycles, newest first, with what each changed.
    listed = json.loads(ok(home, "sleep", "list", "--json"))
    assert [c["cycle_id"] for c in listed] == [cycle, night["first"]]
    assert listed[1]["changes"] == {"fact_mined": 2} and listed[0]["changes"] == night["counts"]
    assert "1 mined, 1 superseded, 1 retired, 1 promoted, 1 months folded" in ok(
        home, "sleep", "list"
    )

    # `sleep show` (the last cycle by default): phases with timings, then the change set.
    shown = ok(home, "sleep", "show")
    assert shown.startswith(f"{cycle} (nightly) done")
    for phase in ("wind_down", "maintenance", "mining", "wake_up"):
        assert f"  {phase}" in shown
    view = json.loads(ok(home, "sleep", "show", cycle, "--json"))
    by_kind = {c["kind"]: c for c in view["changes"]}
    assert [c["change"] for c in view["changes"]] == [1, 2, 3, 4, 5]
    fold, retired = by_kind["month_folded"], by_kind["fact_retired"]
    promoted, mined = by_kind["fact_promoted"], by_kind["fact_mined"]
    superseded = by_kind["fact_superseded"]
    bergen, kotor = superseded["target"], superseded["after"]["id"]
    assert "Bergen" in superseded["before"]["text"] and "Kotor" in superseded["after"]["text"]
    assert fold["target"] == "month:2026-03" and fold["after"]["file"] == (
        "memory/months/month-2026-03.md"
    )
    assert night["nursery_session"] in fold["after"]["sessions"]
    assert retired["target"] == night["dentist"] and "stale" in retired["after"]["reason"]
    assert promoted["target"] == night["passport"]
    sister = mined["target"]
    assert mined["after"]["text"].startswith("My sister Ana is flying in")
    assert all(p["seconds"] is not None for p in view["phases"])
    for c in view["changes"]:
        assert f"#{c['change']:<3}" in shown and c["target"] in shown
    assert f"undo: reverie sleep revert {cycle} [--change N]" in shown

    # Before any revert: the fold, the retirement, the pin and the mined fact are in effect.
    assert "month" in search_ids(home, "nursery walls terracotta").values()
    assert night["dentist"] not in search_ids(home, "dentist appointment")
    assert PASSPORT in (home / "FACTS.md").read_text()
    pinned_tag = f'<memory id="{night["passport"]}" kind="pinned"'
    assert pinned_tag in context_text(home)
    assert sister in search_ids(home, "sister Ana flying")
    offsite = search_ids(home, "team offsite")
    assert kotor in offsite and bergen not in offsite
    before = context_text(home)
    assert f'<memory id="{kotor}"' in before and f'<memory id="{bergen}"' not in before

    # The month fold: its day is back in the recent window, the month retired.
    out = ok(home, "sleep", "revert", cycle, "--change", str(fold["change"]))
    assert out.startswith(f"reverted #{fold['change']} month folded month:2026-03")
    found = search_ids(home, "nursery walls terracotta")
    assert "month" not in found.values() and found
    assert (home / "memory" / "months" / "reverted").is_dir()
    assert not (home / "memory" / "months" / "month-2026-03.md").exists()

    # The retirement: the plan is active again, in search and in MEMORY.md.
    ok(home, "sleep", "revert", cycle, "--change", str(retired["change"]))
    assert night["dentist"] in search_ids(home, "dentist appointment")
    assert DENTIST in (home / "memory" / "MEMORY.md").read_text()

    # The promotion: FACTS.md's pinned block no longer holds it; the fact itself stays.
    ok(home, "sleep", "revert", cycle, "--change", str(promoted["change"]))
    assert PASSPORT not in (home / "FACTS.md").read_text()
    assert night["passport"] in search_ids(home, "passport number")
    assert pinned_tag not in context_text(home)

    # The mined fact: retracted with the reason "reverted", kept in the log.
    ok(home, "sleep", "revert", cycle, "--change", str(mined["change"]))
    assert sister not in search_ids(home, "sister Ana flying")
    retract = [e for e in facts_log(home) if e["op"] == "retract" and e["id"] == sister]
    assert len(retract) == 1 and retract[0]["reason"].startswith("reverted")
    assert any(e["id"] == sister and e["op"] != "retract" for e in facts_log(home))

    # The supersession: the old value is current again, the newer one retired, both kept.
    ok(home, "sleep", "revert", cycle, "--change", str(superseded["change"]))
    offsite = search_ids(home, "team offsite")
    assert bergen in offsite and kotor not in offsite
    assert [e["op"] for e in facts_log(home) if e["id"] == bergen][-1] == "reinstate"
    after = context_text(home)
    assert f'<memory id="{bergen}"' in after and f'<memory id="{kotor}"' not in after

    # Each revert is itself a change; the reverted ones say by which.
    after = json.loads(ok(home, "sleep", "show", cycle, "--json"))["changes"]
    reverts = [c for c in after if c["kind"] == "reverted"]
    assert sorted(c["target"] for c in reverts) == ["#1", "#2", "#3", "#4", "#5"]
    for c in after:
        if c["kind"] != "reverted":
            assert c["reverted_at"] and c["reverted_by"] in {r["change"] for r in reverts}
    assert "reverted by #" in ok(home, "sleep", "show", cycle)

    # Twice is refused, with when; a whole cycle with nothing left likewise.
    again = reverie(home, "sleep", "revert", cycle, "--change", str(fold["change"]))
    assert again.returncode == 1 and "was already reverted at" in again.stderr
    whole = reverie(home, "sleep", "revert", cycle)
    assert whole.returncode == 1 and "reverted already; nothing to revert" in whole.stderr
    missing = reverie(home, "sleep", "revert", cycle, "--change", "99")
    assert missing.returncode == 1 and "has no change #99" in missing.stderr

    # The next night does not redo what was reverted: no refold, no re-pin, no re-retirement.
    third = anyio.run(third_night, home)
    assert third["counts"] == {"month_folded": 1}  # only the late March session
    assert night["nursery_session"] in third["recent"]
    assert third["month_active"] and "boiler" in third["month_text"].lower()
    assert "nursery" not in third["month_text"] and all("march-late" in u for u in third["folded"])
    assert PASSPORT not in (home / "FACTS.md").read_text()
    assert night["dentist"] in search_ids(home, "dentist appointment")


async def revert_whole(root: Path, cycle: str) -> tuple[Any, list[Any]]:
    cfg = sleep_settings(fold_after_days=30, retire_after_days=7)
    async with rig(root, settings=cfg) as r:
        reverter = ChangeReverter(
            home=r.home, db=r.db, memory=r.memory, settings=r.settings, clock=r.clock
        )
        done = await reverter.revert(cycle)
        with pytest.raises(ChangeError, match="were all reverted already"):
            await reverter.revert(cycle)
        return done, await list_changes(r.db, cycle)


def test_a_whole_night_is_reverted_newest_first_and_each_revert_recorded(
    slept: tuple[Path, dict[str, Any]],
) -> None:
    home, night = slept
    done, changes = anyio.run(revert_whole, home, night["second"])
    assert [c.seq for c, _ in done.undone] == [5, 4, 3, 2, 1] and not done.not_reverted
    assert [(c.kind, c.target) for c in changes[5:]] == [
        ("reverted", f"#{n}") for n in (5, 4, 3, 2, 1)
    ]
    assert all(c.reverted_at for c in changes[:5])
    mined = next(c.target for c in changes if c.kind == "fact_mined")
    assert mined not in search_ids(home, "sister Ana flying")
    superseded = next(c for c in changes if c.kind == "fact_superseded")
    offsite = search_ids(home, "team offsite")
    assert superseded.target in offsite and superseded.after["id"] not in offsite  # type: ignore[index]
    assert PASSPORT not in (home / "FACTS.md").read_text()
    assert night["dentist"] in search_ids(home, "dentist appointment")
    assert "month" not in search_ids(home, "nursery walls terracotta").values()


def test_sleep_show_and_revert_say_clearly_what_is_wrong(tmp_path: Path) -> None:
    home = tmp_path / "empty"
    none = reverie(home, "sleep", "show")
    assert none.returncode == 1 and "no sleep cycle yet" in none.stderr
    unknown = reverie(home, "sleep", "revert", "sleep-nope")
    assert unknown.returncode == 1 and "no sleep cycle 'sleep-nope'" in unknown.stderr
    assert ok(home, "sleep", "list").strip() == "(no sleep cycles yet)"


async def dreamt(root: Path) -> str:
    """A recorded cycle whose dream revised the cooking addendum; returns the original addendum."""
    from daemon.sleep.checkpoints import Checkpoints, PhaseStatus
    from daemon.sleep.dreams import DreamsPhase
    from tests.sleep_phase_support import START as EARLY
    from tests.sleep_phase_support import sleep_home

    async with sleep_home(root) as rig:
        original = (rig.home.topics_dir / "cooking.md").read_text()
        await rig.add_session(
            "bake", [("user", "My sourdough is flat."), ("assistant", "We decided to proof the sourdough overnight.")],
            started=EARLY,
        )  # fmt: skip
        rig.clock.advance(days=1)
        checkpoints = Checkpoints(rig.db)
        await checkpoints.begin(
            cycle_id="night-1", reason="nightly", session_id="t", at=rig.clock.now()
        )
        await DreamsPhase().run(rig.context(since=EARLY - timedelta(hours=1), cycle_id="night-1"))
        await checkpoints.finish(
            "night-1", at=rig.clock.now(), status=PhaseStatus.DONE,
            new_session_id=None, woke_early=False, deferred=[],
        )  # fmt: skip
    return original


def test_reverting_a_night_reverts_its_dream_revisions_too(tmp_path: Path) -> None:
    home = tmp_path / "home"
    original = anyio.run(dreamt, home)
    cooking = home / "topics" / "cooking.md"
    assert cooking.read_text() != original
    shown = ok(home, "sleep", "show", "night-1")
    assert "changes: no memory changes; 1 dream revision(s)" in shown
    assert "dream applied  addendum cooking" in shown
    out = ok(home, "sleep", "revert", "night-1")
    assert out.startswith("reverted dream revision d-")
    assert cooking.read_text() == original
    assert json.loads(ok(home, "dreams", "--json"))[0]["status"] == "reverted"
    again = reverie(home, "sleep", "revert", "night-1")
    assert again.returncode == 1 and "were all reverted already" in again.stderr
