"""One night's consolidation: model calls, tokens and wall time at 30 and 365 days of history.

    nice -n 10 .venv/bin/python -m bench.consolidation_cost --days 30 365

For each history length a home is filled through the daemon's own writer and indexer: one
conversation a day (six messages, the person's lines carrying facts in passing — a
preference, a relation, a plan with a date, a changed plan), summarised, and a fact
remembered every third day, on a `FakeClock`. A copy of the home then sleeps twice with the
daemon's real sleep cycle (`SleepCycle.run`, the nightly phases: wind-down, mining,
maintenance, dreams, wake-up), in each of two model set-ups:

- `api`: the summariser and dreams roles on the Anthropic provider (the official SDK) against
  the fake Messages API of `tests/fakes` over HTTP: every request the night makes is real, and
  the usage ledger counts calls and tokens (the fake counts a token per four characters; its
  replies are short scripted texts, so output tokens are the night's floor, not a model's);
- `offline`: the offline model, which makes no network call (its calls and estimated tokens
  are still in the ledger).

Before each night one day's conversation is said to the live trunk (the offline model answers;
the trunk's own turns are not counted). Night 1 is the first sleep ever, which also reads the
whole backlog (mining reads at most `sleep.mining_max_messages` a night; maintenance folds
every month older than `fold_after_days`); when the backlog is longer than that cap, the
"backlog" nights that follow read the rest; night 2 follows one more day and is what every
further night costs (`--show-superseded` lists what it superseded and the message that said
so). Each phase is timed
through a wrapper with its model calls and tokens; `wind_down` (the day's summary) is what the
cycle spends outside the phases. Embeddings use the hashing embedder (MiniLM's cost is
measured in "Embedders").
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from daemon.agent.turns import TurnDone, TurnFailed  # noqa: E402
from daemon.clock import FakeClock  # noqa: E402
from daemon.log import configure  # noqa: E402
from daemon.memory.embedders import HashEmbedder  # noqa: E402
from daemon.models.anthropic import AnthropicModel  # noqa: E402
from daemon.models.base import Model  # noqa: E402
from daemon.models.offline import OfflineModel  # noqa: E402
from daemon.paths import Home  # noqa: E402
from daemon.services import Services, nightly_phases, open_services  # noqa: E402
from daemon.settings import AnthropicSettings, SchedulerSettings, Settings  # noqa: E402
from daemon.sleep.changes import change_counts, list_changes  # noqa: E402
from daemon.sleep.phases import Phase, PhaseContext, PhaseReport  # noqa: E402
from daemon.store.db import Database  # noqa: E402
from tests.fakes.anthropic_server import FakeAnthropic, Planned  # noqa: E402

START = datetime(2025, 1, 1, 9, 0, tzinfo=UTC)
SUBJECTS = [
    ("sourdough", "We decided to feed the starter twice a day with rye flour."),
    ("budget", "We agreed to move 400 euros a month into the index fund."),
    ("garden", "I will plant tomatoes and basil along the south fence in spring."),
    ("scraper", "We decided to add a retry with backoff around every request."),
    ("novel", "We agreed chapter three needs a slower opening scene."),
    ("trip", "We decided to book the night train to Vienna."),
    ("running", "I will run three times a week with one long run on Sundays."),
]
PEOPLE = ["Ana", "Tomas", "Ines", "Rui", "Marta", "Joana", "Pedro", "Helena"]
CITIES = ["Bergen", "Kotor", "Porto", "Lyon", "Ghent", "Split", "Graz"]
RELATIONS = ["sister", "colleague", "neighbour", "friend"]
# What the fake answers every request with: a short text, the size of a modest real answer.
REPLY = (
    "The day went over the plans already noted; nothing new to change. The open thread is the "
    "follow-up on Friday."
)


def bench_settings() -> Settings:
    return Settings(scheduler=SchedulerSettings(timezone="UTC"))


def day_messages(day: int) -> tuple[str, list[tuple[str, str]]]:
    """One day's conversation: a subject, a decision and a few facts said in passing."""
    subject, decision = SUBJECTS[day % len(SUBJECTS)]
    person = PEOPLE[day % len(PEOPLE)]
    relation = RELATIONS[day % len(RELATIONS)]
    city = CITIES[day % len(CITIES)]
    moved = CITIES[(day + 3) % len(CITIES)]
    when = (START + timedelta(days=day + 9)).date().isoformat()
    said = [
        ("user", f"Let's pick up the {subject} again. {person} is my {relation}, by the way."),
        ("assistant", f"Noted. Last time we covered the {subject} basics."),
        ("user", f"I prefer mornings for the {subject}. The meetup is in {city} on {when}."),
        ("assistant", decision),
        ("user", f"Change of plan: the meetup moves from {city} to {moved}."),
        ("assistant", "Understood, I will keep that in mind."),
    ]
    return f"d{day:04d}-{subject}", said


async def add_day(services: Services, clock: FakeClock, day: int) -> None:
    """Write one day's trunk session through the writer and indexer; summarise it."""
    sid, said = day_messages(day)
    started = START + timedelta(days=day, hours=1)
    clock.set(started)
    await services.db.execute(
        "INSERT INTO sessions(id, kind, transcript_path, started_at) VALUES (?, 'trunk', ?, ?)",
        (sid, f"/bench/{sid}.jsonl", started.isoformat()),
    )
    for i, (role, content) in enumerate(said):
        await services.db.execute(
            "INSERT INTO messages(session_id, msg_id, seq, ts, role, content) VALUES (?, ?, ?, ?, ?, ?)",
            (sid, f"{sid}-m{i}", i, (started + timedelta(minutes=i)).isoformat(), role, content),
        )
    await services.memory.index_session(sid)
    await services.memory.summarise_session(sid, wait=True)
    if day % 3 == 0:
        subject = SUBJECTS[day % len(SUBJECTS)][0]
        await services.memory.remember(f"my {subject} notes live in notebook {day}")


async def live_day(services: Services, clock: FakeClock, day: int) -> None:
    """The day before the night, said to the live trunk (the session the wind-down summarises)."""
    _, said = day_messages(day)
    clock.set(START + timedelta(days=day, hours=1))
    for role, text in said:
        if role != "user":
            continue
        done = anyio.Event()

        def observe(event: Any, done: anyio.Event = done) -> None:
            if isinstance(event, TurnDone | TurnFailed):
                done.set()

        await services.trunk.submit(text, observer=observe)
        with anyio.fail_after(60):
            await done.wait()


async def fill(root: Path, days: int) -> float:
    """A home with `days` days of history; return the seconds it took."""
    home = Home(root)
    home.ensure()
    clock = FakeClock(START)
    offline = OfflineModel()
    t0 = time.perf_counter()
    async with open_services(
        home,
        bench_settings(),
        clock,
        models={"summariser": offline, "dreams": offline},
        embedder=HashEmbedder(),
        watch_files=False,
    ) as services:
        for day in range(days):
            await add_day(services, clock, day)
    return time.perf_counter() - t0


async def ledger(db: Database) -> tuple[int, int, int, float]:
    row = await db.fetchone(
        "SELECT count(*), coalesce(sum(input_tokens + cache_read_tokens + cache_write_tokens), 0), "
        "coalesce(sum(output_tokens), 0), coalesce(sum(cost_usd), 0) FROM usage_ledger "
        "WHERE role != 'trunk'"
    )
    return int(row[0]), int(row[1]), int(row[2]), float(row[3])


@dataclass
class Spent:
    seconds: float = 0.0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    def add(self, seconds: float, before: Sequence[float], after: Sequence[float]) -> None:
        self.seconds += seconds
        self.calls += int(after[0] - before[0])
        self.tokens_in += int(after[1] - before[1])
        self.tokens_out += int(after[2] - before[2])
        self.cost_usd += after[3] - before[3]


@dataclass
class Night:
    label: str = ""
    total: Spent = field(default_factory=Spent)
    phases: dict[str, Spent] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    superseded: list[str] = field(default_factory=list)  # old → new, by which message


class Timed:
    """A sleep phase run as it is, its wall time and model use noted."""

    def __init__(self, phase: Phase, night: list[Night]) -> None:
        self.phase = phase
        self.name = phase.name
        self.optional = phase.optional
        self.night = night

    async def run(self, ctx: PhaseContext) -> PhaseReport:
        before = await ledger(ctx.db)
        t0 = time.perf_counter()
        report = await self.phase.run(ctx)
        seconds = time.perf_counter() - t0
        after = await ledger(ctx.db)
        self.night[-1].phases.setdefault(self.name, Spent()).add(seconds, before, after)
        return report


async def sleep_twice(root: Path, days: int, models: dict[str, Model]) -> list[Night]:
    """The daemon's sleep cycle on the home: the first night, one more day, the next night."""
    clock = FakeClock(START + timedelta(days=days))
    nights: list[Night] = []
    models = {"trunk": OfflineModel(), **models}  # the day's turns are not the night's cost

    def phases(trunk: Any) -> list[Phase]:
        return [Timed(p, nights) for p in nightly_phases(trunk)]

    async with open_services(
        Home(root),
        bench_settings(),
        clock,
        models=models,
        embedder=HashEmbedder(),
        phases=phases,
        watch_files=False,
    ) as services:
        db = services.db

        async def sleep(label: str) -> None:
            nights.append(Night(label=label))
            before = await ledger(db)
            t0 = time.perf_counter()
            outcome = await services.sleep_cycle.run("nightly")
            nights[-1].total.add(time.perf_counter() - t0, before, await ledger(db))
            counts = await change_counts(db, [outcome.cycle_id])
            nights[-1].changes = counts.get(outcome.cycle_id, {})
            nights[-1].superseded = [
                f"{c.target}: {(c.before or {}).get('text', '')!r} → "
                f"{(c.after or {}).get('text', '')!r} (by {(c.after or {}).get('changed_by')})"
                for c in await list_changes(db, outcome.cycle_id)
                if c.kind == "fact_superseded"
            ]

        async with anyio.create_task_group() as tg:
            await tg.start(partial(services.serve, jobs=False))
            await live_day(services, clock, days)
            clock.set(START + timedelta(days=days, hours=20))
            await sleep("night 1")
            # Mining reads at most `sleep.mining_max_messages` a night: a history longer than
            # that takes more nights to read. Those are the backlog's, not an ordinary night's.
            extra = 0
            while await unmined(db):
                extra += 1
                clock.set(START + timedelta(days=days, hours=20, minutes=10 * extra))
                await sleep(f"backlog {extra}")
            await live_day(services, clock, days + 1)
            clock.set(START + timedelta(days=days + 1, hours=20))
            await sleep("night 2")
            tg.cancel_scope.cancel()
    return nights


async def unmined(db: Database) -> int:
    """Messages of trunk and fork sessions that mining has not read yet."""
    row = await db.fetchone(
        "SELECT count(*) FROM messages m JOIN sessions s ON s.id = m.session_id "
        "LEFT JOIN fact_mining c ON c.session_id = m.session_id "
        "WHERE s.kind IN ('trunk', 'fork') AND m.seq > coalesce(c.upto_seq, -1)"
    )
    return int(row[0])


def render(days: int, mode: str, nights: list[Night], *, show: bool = False) -> list[str]:
    out = []
    for night in nights:
        t = night.total
        cost = f", ${t.cost_usd:.4f} at list prices" if t.cost_usd else ""
        changes = ", ".join(f"{k} {v}" for k, v in sorted(night.changes.items())) or "none"
        out.append(
            f"{days:>4} days  {mode:<7} {night.label}: {t.seconds:6.2f} s, {t.calls:>3} model call(s), "
            f"{t.tokens_in:>7} input / {t.tokens_out:>5} output tokens{cost}; changes: {changes}"
        )
        inside = Spent()
        for name, p in night.phases.items():
            inside.seconds += p.seconds
            inside.calls += p.calls
            inside.tokens_in += p.tokens_in
            out.append(
                f"{'':>24}{name:<12} {p.seconds:6.2f} s, {p.calls:>3} call(s), {p.tokens_in:>7} input tokens"
            )
        out.append(
            f"{'':>24}{'wind_down':<12} {t.seconds - inside.seconds:6.2f} s, "
            f"{t.calls - inside.calls:>3} call(s), {t.tokens_in - inside.tokens_in:>7} input tokens"
            " (and the cycle's own steps)"
        )
        if show and night.label == "night 2":
            out.extend(f"{'':>24}superseded {line}" for line in night.superseded)
    return out


async def run_mode(root: Path, days: int, mode: str, show: bool) -> list[str]:
    if mode == "offline":
        offline = OfflineModel()
        nights = await sleep_twice(root, days, {"summariser": offline, "dreams": offline})
        return render(days, mode, nights, show=show)
    with FakeAnthropic() as fake:
        api = AnthropicModel(
            AnthropicSettings(base_url=fake.url, max_retries=0, timeout_s=30.0),
            api_key="sk-bench-consolidation",
        )
        fake.enqueue(*[Planned.reply(REPLY)] * 2000)
        nights = await sleep_twice(root, days, {"summariser": api, "dreams": api})
        received = len(fake.message_requests)
    return [
        *render(days, mode, nights, show=show),
        f"{'':>24}(the fake API received {received} request(s))",
    ]


async def bench(days_list: list[int], modes: list[str], show: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="reverie-consolidation-") as tmp:
        for days in days_list:
            filled = Path(tmp) / f"filled-{days}"
            build_s = await fill(filled, days)
            print(f"{days:>4} days: history built in {build_s:.1f} s", flush=True)
            for mode in modes:
                root = Path(tmp) / f"{mode}-{days}"
                shutil.copytree(filled, root)
                print("\n".join(await run_mode(root, days, mode, show)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, nargs="+", default=[30, 365])
    parser.add_argument(
        "--modes", nargs="+", choices=["api", "offline"], default=["api", "offline"]
    )
    parser.add_argument(
        "--show-superseded",
        action="store_true",
        help="list the facts the ordinary night superseded: old → new, and the message that said it",
    )
    args = parser.parse_args()
    configure("warning", "console", to="stderr")
    anyio.run(bench, args.days, args.modes, args.show_superseded)


if __name__ == "__main__":
    main()
