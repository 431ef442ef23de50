"""The console's pages over a real daemon core: what each shows, and every POST.

Each test fills a real home through the daemon's own services (a conversation with a fork, a
real night's sleep: mining, maintenance, dreams, wake-up; `tests.web_pages_support`) and asks
the console's ASGI app (`build_app`) for its pages over HTTP, logged in with the token, on the
daemon's own event loop. The last test does it all again with the store on a real PostgreSQL
server.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from markupsafe import escape

from daemon.context.assembler import LAYER_ORDER
from daemon.memory.fact_history import fact_chain
from daemon.settings import SchedulerSettings, Settings, StorageSettings
from daemon.sleep.revisions import RevisionStore
from daemon.web import svg
from daemon.web.views import memory as memory_view
from daemon.web.views.context import recent_turns
from daemon.web.views.now import Band, Mark, Timeline, fill_bands
from tests.postgres_server import pg_server, pg_url  # noqa: F401
from tests.web_pages_support import FORK_TASK, TALK, Console, filled_console

pytestmark = pytest.mark.anyio


def _facts_lines(console: Console) -> list[str]:
    return (console.rig.home.memory_dir / "facts.jsonl").read_text().splitlines()


def _fact_id(console: Console, text: str) -> str:
    facts = console.rig.memory.facts.facts()
    return next(f.id for f in facts if f.text == text)


async def test_the_pages_are_behind_the_login(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            console.client.cookies.clear()
            for path in ("/", "/context", "/memory?q=Lisbon", "/sleep", "/journal", "/charts"):
                refused = await console.client.get(path)
                assert refused.status_code == 401, path
                assert "Lisbon" not in refused.text and "<svg" not in refused.text


async def test_now_shows_the_state_the_timeline_and_the_spend(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            soon = await console.rig.services.schedules.add("in 2 hours", "water the ferns")
            later = await console.rig.services.schedules.add("in 3 days", "renew the passport")
            page = await console.client.get("/")
            assert page.status_code == 200
            html = page.text
            assert 'class="state state-awake">awake<' in html
            # Off until the daemon started (the run log's first run), then the night's
            # wind-down and sleep are bands of their own, between awake ones.
            bands = re.findall(r'class="band band-([a-z-]+)"', html)
            assert bands == ["off", "awake", "winding-down", "asleep", "awake"], bands
            began = console.rig.services.started_at
            # This run is on record, open while it runs.
            assert await console.rig.rows("SELECT started_at, ended FROM daemon_runs") == [
                (began.isoformat(), None)
            ]
            assert re.search(
                rf"<title>off \(not running\) [^<]* → {began:%Y-%m-%d %H:%M}</title>", html
            )
            # Every turn is a mark that opens its context; the fork opens its turn's tree.
            rows = await console.rig.rows("SELECT turn_id FROM turn_reports")
            for (turn_id,) in rows:
                assert f'href="/context?turn={turn_id}"' in html
            kelp = console.turns[TALK[2]]
            assert f'href="/journal?turn={kelp}"' in html
            cycle = (await console.rig.rows("SELECT id FROM sleep_cycles"))[0][0]
            assert f'href="/sleep#{cycle}"' in html
            assert "1 fork," in html and "1 sleep cycle." in html
            # What is due within the next hours is on the timeline; what is days away is not.
            marks = re.findall(r'class="mark mark-schedule"[^>]*><title>([^<]*)</title>', html)
            assert marks == [f"reminder due: water the ferns · {soon.next_due:%Y-%m-%d %H:%M}"]
            assert later.text not in html
            # Spend: today's line and each day's row agree with the ledger.
            today = await console.rig.services.ledger.today()
            assert f"${today.cost_usd:.4f}</strong>" in html
            assert f"· {today.calls} calls ·" in html
            for day, spent, calls in await console.rig.rows(
                "SELECT day, SUM(cost_usd), COUNT(*) FROM usage_ledger GROUP BY day"
            ):
                assert f"<tr><td>{day}</td><td>{spent:.4f}</td><td>{calls}</td>" in html
            # The timeline zooms by days within bounds; anything else is the default three.
            assert "The last 1 day " in (await console.client.get("/?days=1")).text
            for odd in ("0", "999", "three"):
                assert "The last 3 days " in (await console.client.get(f"/?days={odd}")).text


async def test_context_shows_each_turn_by_layer_and_explains_one(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            page = await console.client.get("/context")
            assert page.status_code == 200
            for turn_id in console.turns.values():
                assert f'<a href="/context?turn={turn_id}"><g class="bar"' in page.text
            report = json.loads(
                (
                    await console.rig.rows(
                        "SELECT report FROM turn_reports WHERE turn_id = ?",
                        (console.turns[TALK[0]],),
                    )
                )[0][0]
            )
            persona = next(r["tokens"] for r in report["layers"] if r["name"] == "persona")
            assert f"persona: {persona:,} tokens" in page.text

            detail = await console.client.get(f"/context?turn={console.turns[TALK[0]]}")
            assert detail.status_code == 200
            html = detail.text
            assert '<blockquote class="prompt">My sister Ana lives in Lisbon.</blockquote>' in html
            chosen = re.findall(r'<g class="bar chosen" data-label="[^"]*?(turn-[0-9a-f]+)"', html)
            assert chosen == [console.turns[TALK[0]]]
            assert f"<td>{report['layers'][1]['kept']}/{report['layers'][1]['items']}</td>" in html
            # Each layer says why it is there, or not (the away layer: the first message).
            away = next(r for r in report["layers"] if r["name"] == "away")
            assert away["why"] == "not shown: the person has not written before"
            assert f'away<div class="muted">{away["why"]}</div>' in html
            # The dream's reflection and KNOWLEDGE.md say why they are not there (none yet).
            for name, why in (
                ("reflection", "not shown: no dream yet"),
                ("knowledge", "not shown: no KNOWLEDGE.md in the home"),
            ):
                row = next(r for r in report["layers"] if r["name"] == name)
                assert row["why"].startswith(why), row
                assert f'{name}<div class="muted">{escape(row["why"])}</div>' in html
            # The fact mined from that message is among the blocks, with the layer that holds it
            # and why: the turn's message recalls it now.
            ana = _fact_id(console, "My sister Ana lives in Lisbon.")
            block = html[html.index(f'<span class="mem-id">{ana}</span>') :]
            assert re.match(r'.*?<div class="why">in (recollections|recall): ', block, re.DOTALL)
            assert "My sister Ana lives in Lisbon." in block[:800]
            # What automatic recall brought says the words it shares with the message, or that
            # it shares none; the message being answered is never recalled to itself.
            whys = re.findall(r'<div class="why">in recall: ([^<]*)', html)
            assert whys and all(
                re.search(r"— shares [^<]* with the message|— no word in common", w) for w in whys
            ), whys
            assert not re.search(r"in recall: [^<]*— shares [^<]*\blisbon\b", html)
            # The instructions are shown as text, never taken for memories.
            assert "<strong>discipline</strong> · " in html and "· 0 memories — how to read" in html

            missing = await console.client.get("/context?turn=turn-nope")
            assert missing.status_code == 404 and "No turn turn-nope on record" in missing.text


async def test_memory_searches_lists_facts_summaries_and_months(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            found = await console.client.get("/memory", params={"q": "where does Ana live"})
            assert found.status_code == 200
            results = found.text[found.text.index('id="results"') : found.text.index('id="facts"')]
            ana = _fact_id(console, "My sister Ana lives in Lisbon.")
            assert "Lisbon" in results and f'<span class="mem-id">{ana}</span>' in results
            counts = dict(
                await console.rig.rows("SELECT kind, COUNT(*) FROM memories GROUP BY kind")
            )
            assert f"{counts['chunk']:,} chunks" in found.text
            blank = await console.client.get("/memory", params={"q": "   "})
            assert blank.status_code == 200 and 'id="results"' not in blank.text
            facts = found.text[found.text.index('id="facts"') : found.text.index('id="summaries"')]
            for fact in console.rig.memory.facts.facts():
                assert f'id="{fact.id}"' in facts
            summary = (await console.rig.rows("SELECT uid FROM memories WHERE kind = 'summary'"))[0]
            assert f'<span class="mem-id">{summary[0]}</span>' in found.text
            assert "none yet (sleep folds older days into months)" in found.text
            # A long list of facts is cut to the newest, and the page says how many there are.
            listed = await memory_view.facts(console.rig.services, limit=2)
            everything = console.rig.memory.facts.facts()
            assert listed.total == len(everything) > 2
            assert [f["id"] for f in listed.rows] == [f.id for f in reversed(everything[-2:])]


async def test_the_memory_header_counts_the_facts_the_rows_show(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            memory = console.rig.memory
            await memory.remember("I am vegetarian", target="profile")
            await memory.remember("I prefer tea to coffee", target="profile")
            old = _fact_id(console, "my dentist is Dr Vidal")
            await memory.facts.retract(old, reason="moved away", origin="person")

            def header_and_rows(html: str) -> tuple[list[str], int]:
                facts = html[html.index('id="facts"') : html.index('id="summaries"')]
                heads = re.findall(r'<span class="fact-count">([^<]*)</span>', html)
                return heads, facts.count('<tr class="fact ')

            current = memory.facts.facts()
            profile = sum(f.target == "profile" for f in current)
            heads, rows = header_and_rows((await console.client.get("/memory")).text)
            said = f"{len(current)} facts ({len(current) - profile} memory · {profile} profile)"
            assert rows == len(current) and heads == [said, said], heads
            # With the changed and retracted ones, the header counts those rows too.
            every = memory.facts.facts(include_retired=True)
            heads, rows = header_and_rows((await console.client.get("/memory?all=1")).text)
            assert rows == len(every) == len(current) + 1
            assert heads[0] == (
                f"{len(every)} facts ({len(current)} current · 1 retired;"
                f" {len(every) - profile} memory · {profile} profile)"
            ), heads


async def test_retract_and_correct_append_to_the_fact_log_and_need_the_csrf_token(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            dentist = _fact_id(console, "my dentist is Dr Vidal")
            ana = _fact_id(console, "My sister Ana lives in Lisbon.")
            before = _facts_lines(console)

            forged = await console.client.post(
                "/memory/retract", data={"fact": dentist, "reason": "forged"}
            )
            assert forged.status_code == 403 and _facts_lines(console) == before
            wrong = await console.client.post(
                "/memory/retract", data={"fact": dentist, "csrf": "not-the-token"}
            )
            assert wrong.status_code == 403 and _facts_lines(console) == before

            token = await console.csrf()
            done = await console.client.post(
                "/memory/retract", data={"fact": dentist, "reason": "moved away", "csrf": token}
            )
            assert done.status_code == 200 and f"{dentist} retracted" in done.text
            after = _facts_lines(console)
            # Appended, never rewritten: every line that was there is there, in order.
            assert after[: len(before)] == before and len(after) == len(before) + 1
            assert console.rig.memory.facts.get(dentist).retired_at is not None  # type: ignore[union-attr]
            assert f'id="{dentist}"' not in done.text  # only current facts by default
            everything = await console.client.get("/memory", params={"all": "1"})
            row = everything.text[everything.text.index(f'id="{dentist}"') :]
            assert "retired: moved away" in row[:1500]

            corrected = await console.client.post(
                "/memory/correct",
                data={"fact": ana, "text": "My sister Ana lives in Porto.", "csrf": token},
            )
            assert corrected.status_code == 200, corrected.text
            assert _facts_lines(console)[: len(after)] == after
            new = console.rig.memory.facts.current(ana)
            assert new is not None and new.id != ana and new.text == "My sister Ana lives in Porto."
            assert [f.id for f in fact_chain(console.rig.memory.facts.log, new.id)] == [ana, new.id]
            history = corrected.text[corrected.text.index(f'id="{new.id}"') :]
            assert "history (2 values)" in history[:3000] and "Lisbon" in history[:3000]

            unknown = await console.client.post(
                "/memory/retract", data={"fact": "fact:999", "csrf": token}
            )
            assert unknown.status_code == 400 and "fact:999" in unknown.text, unknown.text
            for data, why in (
                ({"fact": "fact:999", "text": "x"}, "fact:999"),
                ({"fact": ana, "text": "   "}, "a correction needs the new text"),
                ({"fact": "", "text": "x"}, "which fact?"),
            ):
                refused = await console.client.post("/memory/correct", data={**data, "csrf": token})
                assert refused.status_code == 400 and why in refused.text, refused.text
            assert _facts_lines(console)[: len(after)] == after


async def test_sleep_shows_cycles_wake_notes_and_reverts_a_dream_revision(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            home = console.rig.home
            page = await console.client.get("/sleep")
            assert page.status_code == 200
            cycle = (await console.rig.rows("SELECT id FROM sleep_cycles"))[0][0]
            article = page.text[page.text.index(f'id="{cycle}"') :]
            for phase in ("wind_down", "mining", "maintenance", "dreams", "wake_up"):
                assert f"<td>{phase}</td><td>done</td>" in article
            assert "fact mined" in article
            assert home.wake_file.read_text().splitlines()[0] in page.text
            store = RevisionStore(home, console.rig.db)
            rev = next(r for r in await store.recent() if r.target == "cooking")
            cooking = home.root / rev.files[0].path
            assert cooking.read_text() == rev.files[0].after
            shown = page.text[
                page.text.index(f'<article class="revision status-applied" id="{rev.id}"') :
            ]
            assert '<span class="d-add">+## Lessons</span>' in shown
            assert f"Revert {rev.id}</button>" in shown

            forged = await console.client.post("/sleep/revert", data={"revision": rev.id})
            assert forged.status_code == 403 and cooking.read_text() == rev.files[0].after

            token = await console.csrf("/sleep")
            done = await console.client.post(
                "/sleep/revert", data={"revision": rev.id, "csrf": token}
            )
            assert done.status_code == 200
            assert f"reverted {rev.id}: {rev.files[0].path} restored" in done.text
            assert cooking.read_text() == rev.files[0].before
            assert (await store.get(rev.id)).status == "reverted"  # type: ignore[union-attr]
            assert f'<article class="revision status-reverted" id="{rev.id}"' in done.text

            again = await console.client.post(
                "/sleep/revert", data={"revision": rev.id, "csrf": token}
            )
            assert again.status_code == 400 and "already reverted" in again.text
            unknown = await console.client.post(
                "/sleep/revert", data={"revision": "d-00000000", "csrf": token}
            )
            assert unknown.status_code == 400 and "no dream revision" in unknown.text


async def test_journal_by_day_and_a_turns_fork_tree(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            page = await console.client.get("/journal")
            assert page.status_code == 200
            day = console.rig.clock.now().astimezone(UTC).date().isoformat()
            assert f'href="/journal?day={day}" class="chosen"' in page.text
            assert page.text.count('<article class="entry">') >= 1
            kelp = console.turns[TALK[2]]
            assert f'<a href="/journal?turn={kelp}">{kelp}</a> — 1 fork' in page.text

            tree = await console.client.get("/journal", params={"turn": kelp})
            (fork_id, tokens) = (
                await console.rig.rows(
                    "SELECT id, tokens FROM forks WHERE parent_turn_id = ?", (kelp,)
                )
            )[0]
            node = tree.text[tree.text.index(f'<span class="mem-id">{fork_id}</span>') :]
            assert '<span class="badge">complete</span> depth 1' in node
            assert f"{tokens:,} tokens" in node and FORK_TASK in node and "42 rows of kelp" in node

            none = await console.client.get("/journal", params={"turn": console.turns[TALK[0]]})
            assert "this turn started no forks" in none.text
            bad = await console.client.get("/journal", params={"day": "yesterday-ish"})
            assert bad.status_code == 400 and "is not a date" in bad.text


def _chart(html: str, label: str) -> str:
    start = html.index(f'aria-label="{label}"')
    return html[start : html.index("</svg>", start)]


def _ticks(drawn: str) -> list[float]:
    return [
        float(t.replace(",", "")) for t in re.findall(r'class="axis tick"[^>]*>([^<]*)<', drawn)
    ]


def _nice(ticks: list[float], peak: float) -> None:
    """Ticks from 0 in one step of 1, 2 or 5 times a power of ten, just covering `peak`."""
    assert ticks[0] == 0 and len(ticks) >= 2 and ticks[-1] >= peak > ticks[-2], (ticks, peak)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert round(mantissa, 6) in (1, 2, 5), ticks
    assert all(math.isclose(b - a, step) for a, b in itertools.pairwise(ticks)), ticks


async def test_charts_draw_memory_tokens_spend_and_sleep(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with filled_console(tmp_path / "home") as console:
            await console.rig.bus.drain()  # the night's last journal note is written
            page = await console.client.get("/charts")
            assert page.status_code == 200
            for label in (
                "memory growth by kind",
                "context tokens per turn by layer",
                "spend per day",
                "sleep per night",
            ):
                assert f'aria-label="{label}"' in page.text
            # A young home (two days): the totals per kind as bars, each with its count, and
            # a sentence saying so — not a few dots on an empty chart.
            counts = dict(
                await console.rig.rows("SELECT kind, COUNT(*) FROM memories GROUP BY kind")
            )
            days = await console.rig.rows("SELECT DISTINCT substr(created_at, 1, 10) FROM memories")
            assert len(days) == 2
            growth = _chart(page.text, "memory growth by kind")
            for kind, n in counts.items():
                assert f"<title>{kind}: {n:,} memories</title>" in growth
                assert f'class="axis value" text-anchor="middle">{n:,}</text>' in growth
            assert f"2 days so far (since {min(d for (d,) in days)}): " in page.text
            assert "<circle" not in growth
            _nice(_ticks(growth), max(counts.values()))
            # Sleep per night: nice ticks in a unit that reads (hours, minutes or seconds).
            (began, ended) = (
                await console.rig.rows("SELECT started_at, finished_at FROM sleep_cycles")
            )[0]
            asleep = (datetime.fromisoformat(ended) - datetime.fromisoformat(began)).total_seconds()
            unit, per = svg.duration_unit(asleep)
            sleep = _chart(page.text, "sleep per night")
            assert f'class="axis unit">{unit}</text>' in sleep
            _nice(_ticks(sleep), asleep / per)
            turns = await recent_turns(console.rig.services, limit=60)
            tokens = max(sum(t.layers.get(n, 0) for n in LAYER_ORDER) for t in turns)
            _nice(_ticks(_chart(page.text, "context tokens per turn by layer")), tokens)

            # Days later: a line per kind over every day since the first, the quiet ones too.
            console.rig.clock.advance(days=3)
            await console.rig.memory.remember("the kiln fires at 1200 degrees")
            later = await console.client.get("/charts")
            growth = _chart(later.text, "memory growth by kind")
            first = date.fromisoformat(min(d for (d,) in days))
            span = (console.rig.clock.now().date() - first).days + 1
            assert span >= 5
            kinds = {
                kind for (kind,) in await console.rig.rows("SELECT DISTINCT kind FROM memories")
            }
            for kind in kinds:
                assert f'class="legend">{kind}</text>' in growth
            assert growth.count("<circle ") == span * len(kinds)
            assert (
                f"<title>{console.rig.clock.now().date()} · fact: {counts['fact'] + 1}</title>"
                in growth
            )
            assert "so far" not in later.text


def test_nice_ticks_step_by_one_two_or_five_and_label_each_apart() -> None:
    for peak, integer in (
        (0.0137, False), (0.05, False), (0.0012, False), (3.2, False), (37.5, False),
        (100, False), (4, True), (7, True), (123_456, True), (0.4, True),
    ):  # fmt: skip
        ticks = svg.nice_ticks(peak, integer=integer)
        _nice(ticks, peak)
        assert len(ticks) <= 6
        labels = [svg.tick_label(t, ticks) for t in ticks]
        assert len(set(labels)) == len(labels), labels
        if integer:
            assert all(t == int(t) for t in ticks)
    # A night of a second or so, as a fast machine sleeps: seconds, not "0.01 minutes".
    assert svg.duration_unit(0.8) == ("seconds", 1.0)
    assert svg.duration_unit(45 * 60) == ("minutes", 60.0)
    assert svg.duration_unit(7 * 3600) == ("hours", 3600.0)
    drawn = str(svg.bars(["2026-03-01", "2026-03-02"], [0.0137, 0.0021], unit="minutes"))
    labels = re.findall(r'class="axis tick"[^>]*>([^<]*)<', drawn)
    assert labels == ["0.000", "0.005", "0.010", "0.015"], labels


def test_a_long_line_chart_has_no_dot_per_day() -> None:
    days = [(date(2025, 1, 1) + timedelta(days=i)).isoformat() for i in range(400)]
    drawn = str(svg.lines(days, {"fact": list(range(400)), "chunk": [0] * 400}, integer=True))
    assert drawn.count("<polyline ") == 2 and "<circle" not in drawn
    few = str(svg.lines(days[:5], {"fact": [1, 2, 3, 4, 5]}, integer=True))
    assert few.count("<circle ") == 5


def test_the_timeline_escapes_what_the_stores_hold() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    tl = Timeline(
        start=start,
        now=start + timedelta(days=1),
        end=start + timedelta(days=1, hours=12),
        bands=[Band(state="awake", start=start, end=start + timedelta(days=1))],
        marks=[
            Mark(
                kind="turn",
                at=start + timedelta(hours=3),
                label="<script>alert(1)</script>",
                ref='"x',
            ),
        ],
    )
    drawn = str(svg.timeline(tl, link=lambda kind, ref: f"/context?turn={ref}"))
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
    assert 'href="/context?turn=&#34;x"' in drawn


async def test_every_page_and_post_on_postgresql(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    settings = Settings(
        scheduler=SchedulerSettings(timezone="UTC"), storage=StorageSettings(url=pg_url)
    )
    with anyio.fail_after(120):
        async with filled_console(tmp_path / "home", settings=settings) as console:
            assert console.rig.db.is_postgres
            kelp = console.turns[TALK[2]]
            for path in (
                "/",
                "/context",
                f"/context?turn={console.turns[TALK[0]]}",
                "/memory?q=where+does+Ana+live",
                "/memory?all=1",
                "/sleep",
                "/journal",
                f"/journal?turn={kelp}",
                "/charts",
            ):
                page = await console.client.get(path)
                assert page.status_code == 200, (path, page.text[-2000:])
            assert "Lisbon" in (await console.client.get("/memory?q=Lisbon")).text
            token = await console.csrf()
            dentist = _fact_id(console, "my dentist is Dr Vidal")
            done = await console.client.post(
                "/memory/retract", data={"fact": dentist, "csrf": token}
            )
            assert done.status_code == 200 and f"{dentist} retracted" in done.text
            rev = (await RevisionStore(console.rig.home, console.rig.db).recent())[0]
            reverted = await console.client.post(
                "/sleep/revert", data={"revision": rev.id, "csrf": token}
            )
            assert reverted.status_code == 200 and f"reverted {rev.id}" in reverted.text
            assert (console.rig.home.root / rev.files[0].path).read_text() == rev.files[0].before


def test_the_bands_fill_the_gaps_with_awake_and_end_with_the_live_state() -> None:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    now = start + timedelta(days=1)
    night = [
        Band(
            state="winding-down", start=start + timedelta(hours=1), end=start + timedelta(hours=2)
        ),
        Band(state="asleep", start=start + timedelta(hours=2), end=start + timedelta(hours=5)),
    ]
    # A wind-down begun on a full context, before any cycle started: only the live state knows.
    live = Band(state="winding-down", start=now - timedelta(minutes=10), end=now)
    bands = fill_bands(night, start, now, live)
    assert [(b.state, b.start, b.end) for b in bands] == [
        ("awake", start, start + timedelta(hours=1)),
        ("winding-down", start + timedelta(hours=1), start + timedelta(hours=2)),
        ("asleep", start + timedelta(hours=2), start + timedelta(hours=5)),
        ("awake", start + timedelta(hours=5), now - timedelta(minutes=10)),
        ("winding-down", now - timedelta(minutes=10), now),
    ]
    # A cycle from before the window is clipped to it; nothing is drawn after now.
    early = [Band(state="asleep", start=start - timedelta(hours=3), end=start + timedelta(hours=1))]
    assert [(b.state, b.start) for b in fill_bands(early, start, now, None)] == [
        ("asleep", start),
        ("awake", start + timedelta(hours=1)),
    ]
