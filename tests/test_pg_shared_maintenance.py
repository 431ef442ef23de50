"""Two daemons, two homes, one database: the shared facts maintained by one daemon at a time.

Ada and Bob are real daemons on one PostgreSQL database. Both chat and import at once and share
facts (a duplicate, a changed value, a past plan). Ada's sleep is stopped inside the shared
upkeep — the test holds a row of `shared.facts` so her update waits there, with the shared
lock held — and killed; Bob's sleep skips the step while she holds it, then finishes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from daemon.sleep.shared_upkeep import SharedRow, plan
from tests.harness import REPO, DaemonProcess, daemon_env, run_cli, wait_until
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.test_pg_daemon import chat_and_import, pg_home

UPKEEP = "reverie shared maintenance"


def _share(home: Path, text: str) -> int:
    r = run_cli("remember", "--shared", text, "--home", str(home), "--json")
    assert r.returncode == 0, r.stderr
    return int(json.loads(r.stdout)["id"].removeprefix("shared:"))


def _search(home: Path, query: str, *extra: str) -> list[str]:
    r = run_cli("memory", "search", query, "--home", str(home), "--json", *extra)
    assert r.returncode == 0, r.stderr
    hits = json.loads(r.stdout)
    hits = hits.get("results", hits) if isinstance(hits, dict) else hits
    return [h["text"] for h in hits]


def _row(url: str, fact_id: int) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        cur = conn.execute("SELECT * FROM shared.facts WHERE id = %s", (fact_id,))
        names = [d.name for d in cur.description or ()]
        row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def _upkeep_sessions(url: str, schema: str, *, waiting: bool) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            + (" AND wait_event_type = 'Lock'" if waiting else ""),
            (f"{UPKEEP} {schema}",),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.timeout(300)  # two daemons, two imports and three sleeps on a loaded machine
def test_one_daemon_killed_mid_shared_upkeep_and_the_other_finishing_it(
    tmp_path: Path,
    pg_url: str,  # noqa: F811
) -> None:
    ada = DaemonProcess(home=pg_home(tmp_path / "ada", pg_url, "Ada"), env=daemon_env())
    bob = DaemonProcess(home=pg_home(tmp_path / "bob", pg_url, "Bob"), env=daemon_env())
    holder: psycopg.Connection[Any] | None = None
    try:
        ada.start()
        bob.start()
        private = "the spare key is under the blue flower pot"
        r = run_cli("remember", private, "--home", str(ada.home))
        assert r.returncode == 0, r.stderr
        porto = _share(ada.home, "The team offsite is in Porto")
        wifi = _share(ada.home, "The household wifi password is on the fridge")
        wifi_again = _share(bob.home, "the household wifi password is on the fridge.")
        lisbon = _share(bob.home, "The team offsite moved to Lisbon")
        # A plan shared weeks before its date, which has since passed.
        today = datetime.now(UTC)
        day = (today - timedelta(days=30)).date().isoformat()
        plumber = _share(bob.home, f"The plumber comes on {day} to fix the boiler")
        said = (today - timedelta(days=45)).isoformat()
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                "UPDATE shared.facts SET created_at = %s, valid_from = %s WHERE id = %s",
                (said, said, plumber),
            )
        bins = _share(ada.home, "The recycling bins go out on Thursday evenings")
        tuner = _share(bob.home, "The piano tuner visits in the spring")
        chat_and_import(
            ada, bob, lines=150, turns=2, bob_asks="Where is the team offsite this year?"
        )

        # Ada sleeps; the test holds Porto's row, so her shared upkeep stops at it with the
        # shared lock held, after folding the duplicate (a change of its own, committed).
        holder = psycopg.connect(pg_url)
        holder.execute("SELECT id FROM shared.facts WHERE id = %s FOR UPDATE", (porto,))
        ada_sleep = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "sleep", "--wait", "--home", str(ada.home)],
            cwd=REPO,
            env=daemon_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(
            lambda: _upkeep_sessions(pg_url, "agent_ada", waiting=True) == 1,
            90,
            "Ada's shared upkeep to wait on the held row",
        )
        with psycopg.connect(pg_url) as conn:
            held = conn.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
                (f"{UPKEEP} agent_ada",),
            ).fetchone()
        assert held == (1,)  # the shared namespace's lock, on Ada's upkeep session
        folded = _row(pg_url, wifi_again)
        assert folded["retired_as"] == "duplicate" and folded["superseded_by"] == wifi
        assert folded["retired_by"] == "agent_ada" and folded["retired_cycle"]
        # Bob sleeps meanwhile: the shared step is Ada's, so his cycle skips it and says so.
        out = run_cli("sleep", "--wait", "--home", str(bob.home), timeout=90)
        assert out.returncode == 0, out.stderr + bob.logs()
        assert "shared facts: skipped, another daemon is maintaining them now" in out.stdout
        assert _row(pg_url, porto)["retired_at"] is None
        skipped = json.loads(run_cli("sleep", "show", "--home", str(bob.home), "--json").stdout)
        # As if Bob had died between committing a change and recording it: the row carries
        # his stamp; his next upkeep records it in that cycle's change set.
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                "UPDATE shared.facts SET retired_at = now()::text, invalid_from = now()::text, "
                "retired_as = 'stale', retired_reason = 'stale: its date passed', "
                "retired_by = 'agent_bob', retired_cycle = %s, "
                "version = nextval('shared.facts_version') WHERE id = %s",
                (skipped["cycle_id"], tuner),
            )

        # Ada is killed mid-step; the held row is let go; her session (and lock) ends.
        ada.kill()
        ada_sleep.communicate(timeout=60)
        holder.rollback()
        holder.close()
        holder = None
        wait_until(
            lambda: _upkeep_sessions(pg_url, "agent_ada", waiting=False) == 0,
            60,
            "the killed daemon's shared session to end",
        )
        # Bob's next sleep finishes the shared upkeep, and says what it changed.
        out = run_cli("sleep", "--wait", "--home", str(bob.home), timeout=90)
        assert out.returncode == 0, out.stderr + bob.logs()
        assert f"superseded 1 changed value(s) (shared:{porto} by shared:{lisbon})" in out.stdout
        assert f"retired 1 past plan(s) (shared:{plumber})" in out.stdout
        assert "duplicate" not in out.stdout  # Ada's change, made once, not again
        shown = run_cli("sleep", "show", "--home", str(bob.home), "--json")
        assert shown.returncode == 0, shown.stderr
        changes = {(c["kind"], c["target"]) for c in json.loads(shown.stdout)["changes"]}
        assert {
            ("shared_fact_superseded", f"shared:{porto}"),
            ("shared_fact_retired", f"shared:{plumber}"),
        } <= changes
        view = json.loads(shown.stdout)
        seq = next(c["change"] for c in view["changes"] if c["target"] == f"shared:{porto}")
        r = run_cli(
            "sleep", "revert", view["cycle_id"], "--change", str(seq), "--home", str(bob.home)
        )  # fmt: skip
        assert r.returncode != 0 and "changed a shared fact" in r.stderr, r.stderr
        late = run_cli("sleep", "show", skipped["cycle_id"], "--home", str(bob.home), "--json")
        assert ("shared_fact_retired", f"shared:{tuner}") in {
            (c["kind"], c["target"]) for c in json.loads(late.stdout)["changes"]
        }

        # The shared facts end correct: one of each duplicate current, the new value current
        # with the old in history, the past plan retired; nothing deleted.
        assert _row(pg_url, wifi)["retired_at"] is None
        assert _row(pg_url, wifi_again)["retired_by"] == "agent_ada"
        old = _row(pg_url, porto)
        assert old["retired_as"] == "superseded" and old["superseded_by"] == lisbon
        assert old["retired_by"] == "agent_bob" and old["invalid_from"]
        assert old["invalid_from"] == _row(pg_url, lisbon)["valid_from"]
        assert _row(pg_url, lisbon)["retired_at"] is None
        assert _row(pg_url, plumber)["retired_as"] == "stale"
        # Bob's copies follow: the old value leaves the current ones, kept in history.
        current = _search(bob.home, "team offsite")
        assert "The team offsite moved to Lisbon" in current
        assert "The team offsite is in Porto" not in current
        assert "The team offsite is in Porto" in _search(
            bob.home, "team offsite", "--include-retired"
        )
        assert not any("plumber" in t for t in _search(bob.home, "plumber boiler"))
        assert len([t for t in _search(bob.home, "wifi password fridge") if "wifi" in t]) == 1
        # Ada's private fact never reaches Bob.
        assert not any("flower pot" in t for t in _search(bob.home, "spare key flower pot"))
        r = run_cli("recall", "where is the spare key?", "--home", str(bob.home), "--json")
        assert r.returncode == 0 and "flower pot" not in r.stdout

        # The person retracts and corrects shared facts from the CLI: append-only.
        r = run_cli(
            "remember", "--retract", f"shared:{bins}", "--reason", "the council collects now",
            "--home", str(bob.home), "--json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["status"] == "retracted"
        assert _row(pg_url, bins)["retired_as"] == "retracted"
        again = run_cli("remember", "--retract", f"shared:{bins}", "--home", str(bob.home))
        assert again.returncode != 0 and "no longer holds" in again.stderr
        r = run_cli(
            "remember", "--correct", f"shared:{lisbon}", "The team offsite moved to Madrid",
            "--home", str(bob.home), "--json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        madrid = int(json.loads(r.stdout)["id"].removeprefix("shared:"))
        corrected = _row(pg_url, lisbon)
        assert corrected["retired_as"] == "corrected" and corrected["superseded_by"] == madrid
        current = _search(bob.home, "team offsite")
        assert "The team offsite moved to Madrid" in current
        assert "The team offsite moved to Lisbon" not in current
        assert not any("recycling" in t for t in _search(bob.home, "recycling bins Thursday"))

        # Ada comes back: her copies follow every change made while she was away.
        ada = DaemonProcess(home=ada.home, env=daemon_env())
        ada.start()
        current = _search(ada.home, "team offsite")
        assert "The team offsite moved to Madrid" in current
        assert not {"The team offsite moved to Lisbon", "The team offsite is in Porto"} & set(
            current
        )
        assert not any("recycling" in t for t in _search(ada.home, "recycling bins Thursday"))
        assert private in _search(ada.home, "spare key flower pot")
        # Ada's one change before she was killed is in her cycle's change set.
        r = run_cli("sleep", "show", folded["retired_cycle"], "--home", str(ada.home), "--json")
        assert r.returncode == 0, r.stderr
        ada_changes = [
            (c["kind"], c["target"])
            for c in json.loads(r.stdout)["changes"]
            if c["kind"].startswith("shared_")
        ]
        assert ada_changes == [("shared_fact_folded", f"shared:{wifi_again}")]
    finally:
        if holder is not None:
            holder.close()
        for d in (ada, bob):
            if d.proc is not None and d.proc.poll() is None:
                d.stop()


def _rows(*texts: str, origin: str = "person") -> list[SharedRow]:
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    return [
        SharedRow(id=i, text=t, origin=origin, author="agent_x", valid_from=t0 + timedelta(days=i))
        for i, t in enumerate(texts, start=1)
    ]


def _planned(rows: list[SharedRow], today: str = "2026-03-20") -> list[tuple[str, int, int | None]]:
    now = datetime.fromisoformat(today).replace(tzinfo=UTC)
    out = plan(rows, now=now, today=now.date(), tz=UTC, grace_days=7)
    return [(r.kind, r.row.id, r.by.id if r.by else None) for r in out]


def test_the_shared_upkeep_plans_folds_supersessions_and_past_plans() -> None:
    rows = _rows(
        "The team offsite is in Porto",
        "the team offsite is in porto.",  # the same fact again: folded into #1
        "The wifi password is on the fridge",
        "The team offsite moved to Lisbon",  # a new value of #1's slot
        "The plumber comes on 2026-03-10",  # stated before its date, long past by the 20th
        "The team offsite is in Lisbon",  # the same value as #4 again: no change
    )
    assert _planned(rows) == [
        ("duplicate", 2, 1),
        ("superseded", 1, 4),
        ("stale", 5, None),
    ]
    # Within the grace days a past plan stays; nothing current changes twice.
    assert ("stale", 5, None) not in _planned(rows, today="2026-03-15")


def test_an_agents_shared_word_never_supersedes_the_persons() -> None:
    person = _rows("The team offsite is in Porto")
    agent = [
        SharedRow(
            id=2, text="The team offsite moved to Lisbon", origin="agent", author="agent_y",
            valid_from=person[0].valid_from + timedelta(days=1),
        )
    ]  # fmt: skip
    assert _planned(person + agent) == []
