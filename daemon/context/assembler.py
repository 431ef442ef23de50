"""The context assembler: build each turn's system prompt from layers, within a token budget.

Layers, in a fixed order (stable first, so the provider's prompt cache is hit):

    discipline → persona → profile → wake → reflection → themes → recollections ║
    time → away → handover → threads → recall → knowledge → topics → journal

`║` is the cache breakpoint (a second one sits after `wake`, the slowest-changing prefix).
Each layer is first fitted to its own hard cap; when the total is still over
`context.total_budget`, layers give way in `TRUNCATION_ORDER` — first down to their target,
then, if needed, to nothing (the journal only down to its reserve) — and within a layer the
oldest items go first (the journal digest is newest first, so its oldest entries go). Discipline,
persona and the clock line are never cut. The same inputs give the same blocks, byte for byte.

Trust: memory enters only inside labelled `<memory …>` markers under a standing instruction
that it is data, its tag-like markup neutralised (`layers.memory_block`); items from untrusted
origins (tools, imports) never reach the profile or the wake/pinned layer, and contributions
from other handlers are held to the same rule. `FACTS.md` speaks for the person only outside
its generated block: each pinned fact is its own block with its own origin. The report's
`memory_origins` lists the origins of the memory the prompt shows, so the agent loop knows
whose word a turn has read.

This module gathers the layers and composes the turn; the layers are built in their own
modules — `core_layers` (persona, profile, wake), `memory_layers` (themes, recollections,
recall), `situation` (time, away, handover, threads), `reflection`, `knowledge`,
`journal_layer` — and fitted (`budget`), merged with contributions (`contributions`) and
reported (`report`) in theirs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import anyio

from daemon.bus import EventBus
from daemon.clock import Clock
from daemon.context.budget import LAYER_ORDER, cache_blocks, fit_layers, layer_limit
from daemon.context.contributions import merge_contributions
from daemon.context.core_layers import persona_layer, profile_layer, wake_layer
from daemon.context.handover import HandoverDesk
from daemon.context.journal_layer import journal_layer
from daemon.context.knowledge import knowledge_layer
from daemon.context.layers import DISCIPLINE, Entry, Layer, change_noted
from daemon.context.memory_layers import (
    recall_layer,
    recollections_layer,
    stood_for,
    themes_layer,
)
from daemon.context.memory_reads import MemoryRead, ask, auto_recall, mark_corrected
from daemon.context.reflection import last_reflection, reflection_layer
from daemon.context.report import context_report
from daemon.context.situation import away_layer, handover_layer, open_threads_layer, time_layer
from daemon.context.threads import ThreadSource
from daemon.events import BeforeAgentStart, Composer, Contribution, SessionShutdown, TurnContext
from daemon.log import get_logger
from daemon.memory.api import LiveHistory, MemoryItem, MemoryView
from daemon.models.base import SystemBlock
from daemon.paths import Home
from daemon.settings import Settings
from daemon.tokens import TokenCounter
from daemon.topics.files import FileCache
from daemon.topics.router import ADDENDA_HEADING, TopicRouter, TopicScore, render_topic

__all__ = ["LAYER_ORDER", "AssembledContext", "ContextAssembler"]

log = get_logger("context")

HANDLER_PRIORITY = 900
# Shown to the model, inside the never-cut `time` layer, when the store's server is away: so it
# does not claim to have searched a memory it could not read.
STORE_AWAY_NOTICE = (
    '<notice kind="memory-unavailable">\n'
    "Memory search is unavailable right now: the memory store's server cannot be reached. "
    "Recalled memories, facts from the index and session summaries are missing from this "
    "prompt, and the memory tools may fail. Answer from this conversation and what is shown "
    "above; do not say you searched or checked your memory.\n"
    "</notice>"
)
_COUNT_CACHE_MAX = 20_000


@dataclass(frozen=True, kw_only=True)
class AssembledContext:
    """One turn's system prompt: the blocks, what each layer cost, and what was cut."""

    blocks: list[SystemBlock]
    report: dict[str, Any]
    total_tokens: int
    active_topics: list[str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


@dataclass(frozen=True, kw_only=True)
class _Draft:
    """A turn's layers as read, before other handlers' contributions and the fit to budget."""

    started: float
    layers: dict[str, Layer]
    notes: list[str]
    timings: dict[str, float]
    scores: list[TopicScore]
    query: str
    # Memory reads left out because the store's server is away: call -> why.
    skipped: dict[str, str] = field(default_factory=dict)
    # Why a layer is there (or is not), for `reverie context` and the console: layer -> why.
    why: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class _Turn:
    """What one turn's gathering is for, and the notes, timings, skipped reads and reasons
    its layer builders write as they go (in a fixed order, so the output is deterministic)."""

    prompt: str
    previous_reply: str
    session_id: str
    replayed_message_ids: frozenset[str]
    fork: bool
    # Sessions whose memory enters no layer (a fork's ancestors and running siblings).
    excluded: frozenset[str]
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)

    def keep(self, items: list[MemoryItem]) -> list[MemoryItem]:
        """`items` less those of the excluded sessions."""
        return [i for i in items if i.session not in self.excluded] if self.excluded else items


@dataclass(frozen=True, kw_only=True)
class _Recent:
    """The turn's reads of recent memory (change-noted as of `now`)."""

    profile: list[MemoryItem]
    themes: list[MemoryItem]
    summaries: list[MemoryItem]
    facts: list[MemoryItem]
    now: datetime


class ContextAssembler:
    """Build the layered system prompt for a turn; one instance per daemon, safe to share."""

    def __init__(
        self,
        *,
        home: Home,
        settings: Settings,
        view: MemoryView | None,
        router: TopicRouter,
        counter: TokenCounter,
        clock: Clock,
        threads: ThreadSource | None = None,
        handover: HandoverDesk | None = None,
    ) -> None:
        self.home = home
        # The open promises, questions and plans (`daemon.threads`); None: no threads layer.
        self.threads = threads
        # A model switch's letter for the trunk's first turn on the new model; None: no layer.
        self.handover = handover
        self.settings = settings
        self.view = view
        self.router = router
        self.counter = counter
        self.clock = clock
        self.files = FileCache()
        self.last: AssembledContext | None = None
        self._counts: dict[str, int] = {}
        self._basis = counter.basis

    # -- tokens ----------------------------------------------------------------------------

    def count(self, text: str) -> int:
        """Tokens in `text` (memoised: the stable layers repeat every turn)."""
        if self.counter.basis != self._basis:
            self._counts.clear()
            self._basis = self.counter.basis
        n = self._counts.get(text)
        if n is None:
            if len(self._counts) >= _COUNT_CACHE_MAX:
                self._counts.clear()
            n = self._counts[text] = self.counter.count(text)
        return n

    # -- the turn --------------------------------------------------------------------------

    async def assemble(
        self,
        prompt: str,
        *,
        previous_reply: str = "",
        session_id: str = "",
        contributions: Sequence[Contribution] = (),
        replayed_message_ids: frozenset[str] = frozenset(),
        session_kind: str = "trunk",
        exclude_sessions: Sequence[str] = (),
    ) -> AssembledContext:
        """Assemble the system prompt for `prompt`.

        `replayed_message_ids` are the messages of `session_id` the request replays;
        automatic recall leaves them out. A fork (`session_kind="fork"`) also gets
        `persona/NEUROLOGY.md` (what a fork is), and no memory from `exclude_sessions` (its
        ancestors' live sessions and its running siblings) enters any layer: a fork works
        from its brief, never the trunk's conversation.

        Memory failures degrade to missing layers with a note, never an exception. On
        cancellation nothing is recorded and the cancellation propagates; time limits are
        the caller's (the bus runs this under the hook's timeout).
        """
        draft = await self._draft(
            prompt,
            previous_reply=previous_reply,
            session_id=session_id,
            replayed_message_ids=replayed_message_ids,
            session_kind=session_kind,
            exclude_sessions=exclude_sessions,
        )
        return self._compose(draft, contributions)

    async def _draft(
        self,
        prompt: str,
        *,
        previous_reply: str,
        session_id: str,
        replayed_message_ids: frozenset[str],
        session_kind: str,
        exclude_sessions: Sequence[str],
    ) -> _Draft:
        """Gather every layer of the prompt (the memory, file and topic reads) before the fit,
        in `LAYER_ORDER` (each builder's notes land in that order)."""
        started = time.perf_counter()
        turn = _Turn(
            prompt=prompt,
            previous_reply=previous_reply,
            session_id=session_id,
            replayed_message_ids=replayed_message_ids,
            fork=session_kind == "fork",
            excluded=frozenset(exclude_sessions),
        )
        neurology = turn.fork or self.settings.context.include_neurology
        layers: dict[str, Layer] = {
            "discipline": Layer(
                name="discipline",
                entries=[Entry(key="discipline", body=DISCIPLINE)],
                truncatable=False,
            ),
            "persona": persona_layer(self.files, self.home, turn.notes, neurology=neurology),
        }
        recent = await self._read_recent(turn)
        layers.update(self._recent_layers(recent, turn))
        layers.update(await self._situation_layers(turn))
        layers["recall"] = await self._recall_layer(recent, layers, turn)
        layers["knowledge"] = self._knowledge_layer(prompt, turn.notes, turn.why)
        query = f"{prompt}\n{previous_reply}" if previous_reply else prompt
        scores = self.router.explain("system_prompt", query, session_key=session_id or None)
        layers["topics"] = self._topics_layer([s for s in scores if s.selected])
        layers["journal"] = journal_layer(
            self.files,
            self.home,
            self.settings,
            now=self.clock.now(),
            notes=turn.notes,
            why=turn.why,
        )
        await mark_corrected(self.view, layers, turn.notes, turn.skipped)
        if turn.skipped:
            layers["time"].entries.append(Entry(key="store-away", body=STORE_AWAY_NOTICE, rank=1))
        return _Draft(
            started=started,
            layers=layers,
            notes=turn.notes,
            timings=turn.timings,
            scores=scores,
            query=query,
            skipped=turn.skipped,
            why=turn.why,
        )

    async def _read_recent(self, turn: _Turn) -> _Recent:
        """The profile facts, recent entries, summaries and facts, read together; a fact that
        changed lately is shown with what it changed from (never the old alone)."""
        cfg = self.settings.context
        started = time.perf_counter()
        asks: dict[str, MemoryRead] = {
            "profile_facts": lambda v: v.profile_facts(cfg.profile_facts),
            # Themes must not repeat what the profile and recollections show: ask for enough
            # entries to still have `themes_count` once those are set aside.
            "recent_entries": lambda v: v.recent_entries(
                cfg.themes_count
                + cfg.profile_facts
                + cfg.recollection_summaries
                + cfg.recollection_facts
                if cfg.themes_count
                else 0
            ),
            "recent_summaries": lambda v: v.recent_summaries(cfg.recollection_summaries),
            "recent_facts": lambda v: v.recent_facts(cfg.recollection_facts),
        }
        got: dict[str, list[MemoryItem]] = {}
        ask_notes: dict[str, list[str]] = {name: [] for name in asks}

        async def read(name: str) -> None:
            found = await ask(self.view, name, ask_notes[name], asks[name], turn.skipped)
            got[name] = turn.keep(found)

        # Issued together so the database thread takes them back to back; notes are merged
        # in a fixed order so the output stays deterministic.
        async with anyio.create_task_group() as tg:
            for name in asks:
                tg.start_soon(read, name)
        for name in asks:
            turn.notes.extend(ask_notes[name])
        now, days = self.clock.now(), self.settings.memory.change_note_days
        for name in ("profile_facts", "recent_entries", "recent_facts"):
            got[name] = [change_noted(i, now=now, days=days) for i in got[name]]
        turn.timings["memory_ms"] = (time.perf_counter() - started) * 1000
        return _Recent(
            profile=got["profile_facts"],
            themes=got["recent_entries"],
            summaries=got["recent_summaries"],
            facts=got["recent_facts"],
            now=now,
        )

    def _recent_layers(self, recent: _Recent, turn: _Turn) -> dict[str, Layer]:
        """The stable layers after the persona: profile, wake, reflection, themes, recollections."""
        layers = {
            "profile": profile_layer(self.files, self.home, recent.profile, turn.notes),
            "wake": wake_layer(self.files, self.home, turn.notes),
        }
        found, entries = last_reflection(self.home.dreams_dir, self.files, turn.notes)
        layers["reflection"], turn.why["reflection"] = reflection_layer(found, looked=entries > 0)
        # A month shown in place of folded days shows them: neither themes nor recall repeat them.
        elsewhere = {i.id for i in (*recent.profile, *recent.summaries, *recent.facts)}
        elsewhere |= stood_for(recent.summaries)
        themes = [i for i in recent.themes if i.id not in elsewhere]
        layers["themes"] = themes_layer(themes[: self.settings.context.themes_count])
        layers["recollections"] = recollections_layer(recent.summaries, recent.facts)
        return layers

    async def _situation_layers(self, turn: _Turn) -> dict[str, Layer]:
        """The layers after the cache breakpoint that say where the turn stands: the clock
        line, the time away, a model handover, the open threads."""
        zone = self.settings.scheduler.timezone
        notes, why = turn.notes, turn.why
        return {
            "time": time_layer(self.clock.now(), zone, notes),
            "away": await away_layer(
                self.view,
                turn.prompt,
                now=self.clock.now(),
                zone=zone,
                notes=notes,
                skipped=turn.skipped,
                why=why,
            ),
            "handover": await handover_layer(self.handover, notes, why, fork=turn.fork),
            "threads": await open_threads_layer(
                self.threads, clock=self.clock, zone=zone, notes=notes, why=why, fork=turn.fork
            ),
        }

    async def _recall_layer(self, recent: _Recent, layers: dict[str, Layer], turn: _Turn) -> Layer:
        """Automatic recall for the message, less what themes and recollections already show."""
        shown = frozenset(
            e.key for name in ("themes", "recollections") for e in layers[name].entries
        ) | frozenset(stood_for(recent.summaries))
        started = time.perf_counter()
        live = (
            LiveHistory(session=turn.session_id, message_ids=turn.replayed_message_ids)
            if turn.session_id
            else None
        )
        recalled = await auto_recall(
            self.view,
            self.settings,
            turn.prompt,
            previous_reply=turn.previous_reply,
            shown=shown,
            notes=turn.notes,
            live=live,
            skipped=turn.skipped,
        )
        days = self.settings.memory.change_note_days
        recalled = turn.keep([change_noted(i, now=recent.now, days=days) for i in recalled])
        turn.timings["recall_ms"] = (time.perf_counter() - started) * 1000
        return recall_layer(recalled, shown)

    def _compose(self, draft: _Draft, contributions: Sequence[Contribution]) -> AssembledContext:
        """Merge `contributions` into the draft's layers, fit them to the budget, and report."""
        # A copy: contributions are merged into this composition only, never into the draft.
        layers = {
            name: replace(layer, entries=list(layer.entries))
            for name, layer in draft.layers.items()
        }
        notes = list(draft.notes)
        timings = dict(draft.timings)
        rejected = merge_contributions(layers, contributions)
        fitted, over = fit_layers(layers, self.settings, self.count)
        blocks, breakpoints = cache_blocks(fitted)
        total = sum(self.count(b.text) for b in blocks) + max(0, len(blocks) - 1)
        timings["assemble_ms"] = (time.perf_counter() - draft.started) * 1000
        chosen = [s for s in draft.scores if s.selected]
        report = context_report(
            settings=self.settings,
            counter=self.counter.backend,
            memory=self.view is not None,
            topic_problems=self.router.problems,
            layers=layers,
            fitted=fitted,
            total=total,
            over=over,
            breakpoints=breakpoints,
            scores=draft.scores,
            query=draft.query,
            notes=notes,
            rejected=rejected,
            skipped=draft.skipped,
            why=draft.why,
        )
        result = AssembledContext(
            blocks=blocks,
            report=report,
            total_tokens=total,
            active_topics=[s.id for s in chosen],
            timings=timings,
        )
        self.last = result
        return result

    # -- the layers built here -------------------------------------------------------------

    def _topics_layer(self, chosen: list[TopicScore]) -> Layer:
        entries: list[Entry] = []
        for score in chosen:
            topic = self.router.body(score.id)
            if topic is not None:
                entries.append(
                    Entry(key=f"topic:{topic.id}", body=render_topic(topic), rank=len(entries))
                )
        return Layer(name="topics", heading=ADDENDA_HEADING, entries=entries, stable=False)

    def _knowledge_layer(self, prompt: str, notes: list[str], why: dict[str, str]) -> Layer:
        """The person's `KNOWLEDGE.md`, whole or searched by `prompt` (`daemon.context.knowledge`)."""
        path = self.home.knowledge_file
        if not path.exists() and not path.is_symlink():
            # Optional: no file is no layer (a file taken away is gone, not kept as last good).
            self.files.forget(path)
            why["knowledge"] = (
                "not shown: no KNOWLEDGE.md in the home (the person's reference notes)"
            )
            return Layer(name="knowledge", stable=False)
        ft = self.files.read(path)
        if ft.problem:
            notes.append(f"knowledge: {ft.problem}")
            if not ft.stale:
                why["knowledge"] = f"not shown: {ft.problem}"
                return Layer(name="knowledge", stable=False)
        layer, why["knowledge"] = knowledge_layer(
            ft.text, prompt, cap=layer_limit(self.settings, "knowledge")[1], count=self.count
        )
        if ft.stale:
            why["knowledge"] += f"; {ft.problem}"
        return layer

    # -- the hook --------------------------------------------------------------------------

    def register(self, bus: EventBus, *, priority: int = HANDLER_PRIORITY) -> Callable[[], None]:
        """Compose each turn's prompt on `before_agent_start` (default priority 900).

        The handler is *required*: if gathering the layers fails or times out, the gate fails
        and the turn fails visibly — it never goes to the model without persona and memory.
        It returns the turn's `Composer`: the loop hands it every `Contribution` the turn's
        handlers returned, and gets the blocks and the per-layer breakdown (with
        `timings_ms`), which the trunk records per turn for `reverie status`. A session that ends (`session_shutdown`,
        also after a switch) has its topic persistence forgotten. Returns a function that
        unsubscribes both.
        """

        async def on_before_agent_start(event: BeforeAgentStart) -> Composer:
            draft = await self._draft(
                event.prompt,
                previous_reply=event.previous_reply,
                session_id=event.session_id,
                replayed_message_ids=event.replayed_message_ids,
                session_kind=event.session_kind,
                exclude_sessions=event.exclude_sessions,
            )

            def compose(contributions: tuple[Contribution, ...]) -> TurnContext:
                result = self._compose(draft, contributions)
                report = dict(result.report)
                report["timings_ms"] = {k: round(v, 3) for k, v in result.timings.items()}
                log.info(
                    "context assembled",
                    total_tokens=result.total_tokens,
                    budget=result.report["budget"],
                    topics=result.active_topics,
                    cut=sum(len(row["truncated"]) for row in result.report["layers"]),
                    ms=round(result.timings.get("assemble_ms", 0.0), 2),
                )
                return TurnContext(
                    system_blocks=tuple(result.blocks),
                    report=report,
                    active_topics=tuple(result.active_topics),
                )

            return Composer(compose=compose)

        def on_session_shutdown(event: SessionShutdown) -> None:
            self.router.forget(event.session_id)

        undo = [
            bus.on(
                BeforeAgentStart,
                on_before_agent_start,
                priority=priority,
                name="context.assemble",
                required=True,
            ),
            bus.on(SessionShutdown, on_session_shutdown, name="context.forget_topics"),
        ]

        def unsubscribe() -> None:
            for u in undo:
                u()

        return unsubscribe
