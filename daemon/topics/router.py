"""The topic router: load 'how to think about this domain' only when the conversation touches it.

Score = trigger overlap + priority × 0.5, where overlap counts the distinct triggers found
in the query as phrases (their words in order, each in an inflected form; see `matrix`).
A trigger the matrix lists as ambiguous ("code": a program's, or a locker's) counts only
with support — one of its sense cues, or a second trigger of the same topic — so one
everyday word never loads a domain on its own. **A topic with zero overlap is never selected**, whatever
its priority: with the default thresholds (min 1) a priority of 2 alone would otherwise pass
and every high-priority topic would load on every turn, sandwiches included. Priority boosts
a real match and breaks ties; it never stands in for one.

Each injection point (`system_prompt`, `recall_persona`, `summary_persona`) has its own top N
and minimum score, and a topic's `scope` limits the points it may appear at. With a session
key, a chosen topic stays active for `persist_turns` further turns after its keywords stop
appearing, so a conversation about a bug does not lose its debugging stance on "ok, and now?".

`reload()` re-reads the matrix and topic files. A broken matrix keeps the last good one; a
topic whose file is missing or unreadable keeps its last good body if it had one, and is
otherwise skipped — each case is logged and listed in `problems`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

from daemon.log import get_logger
from daemon.paths import Home
from daemon.settings import TopicPoint, TopicsSettings
from daemon.topics.matrix import (
    POINTS,
    Matrix,
    MatrixError,
    TopicSpec,
    Trigger,
    phrase_words,
    read_matrix,
    topic_body,
)

log = get_logger("topics")

ADDENDA_HEADING = "## Topic Addenda"
_MAX_SESSIONS = 256


@dataclass(frozen=True, kw_only=True)
class Topic:
    """A usable topic: its declaration and the body that gets injected."""

    spec: TopicSpec
    title: str
    body: str

    @property
    def id(self) -> str:
        return self.spec.id


@dataclass(frozen=True, kw_only=True)
class TopicScore:
    """How one topic scored for one query at one injection point."""

    id: str
    score: float
    overlap: int
    priority: float
    matched: tuple[str, ...]
    selected: bool = False
    persisted: bool = False
    turns_left: int = 0
    reason: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "score": self.score,
            "overlap": self.overlap,
            "priority": self.priority,
            "matched": list(self.matched),
            "selected": self.selected,
            "persisted": self.persisted,
            "turns_left": self.turns_left,
            "reason": self.reason,
        }


def matrix_path(home: Home, settings: TopicsSettings) -> Path:
    """Where the matrix lives: `topics.matrix`, relative to the home unless absolute."""
    configured = Path(settings.matrix)
    return configured if configured.is_absolute() else home.root / configured


class TopicRouter:
    """Score topics against a query and keep chosen ones alive for a few turns per session."""

    def __init__(self, home: Home, settings: TopicsSettings) -> None:
        self.home = home
        self.settings = settings
        self.path = matrix_path(home, settings)
        self._topics: dict[str, Topic] = {}
        self._order: tuple[str, ...] = ()
        self._problems: tuple[str, ...] = ()
        self._loaded = False
        self.version = 0
        # (session key, point) → topic id → (turns left, score when last chosen)
        self._memory: OrderedDict[tuple[str, str], dict[str, tuple[int, float]]] = OrderedDict()
        self._lock = threading.Lock()

    # -- loading ---------------------------------------------------------------------------

    @property
    def topics(self) -> list[Topic]:
        """The usable topics in matrix order."""
        self._ensure_loaded()
        return [self._topics[i] for i in self._order]

    @property
    def problems(self) -> tuple[str, ...]:
        """What was wrong at the last (re)load, one actionable line each."""
        self._ensure_loaded()
        return self._problems

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.reload()

    def reload(self) -> tuple[str, ...]:
        """Re-read the matrix and topic bodies; keep the last good version of anything broken.

        Returns the problems found (also logged). Never raises for a bad file.
        """
        with self._lock:
            self._loaded = True
            try:
                matrix = read_matrix(self.path)
            except MatrixError as exc:
                kept = (
                    f"; keeping the last good matrix ({len(self._topics)} topics)"
                    if self._topics
                    else "; no topics loaded"
                )
                self._problems = (f"{exc}{kept}",)
                log.error(
                    "personality matrix rejected",
                    path=str(self.path),
                    error=str(exc),
                    kept=len(self._topics),
                )
                return self._problems
            topics, problems = self._load_bodies(matrix)
            self._topics = topics
            self._order = tuple(spec.id for spec in matrix.topics if spec.id in topics)
            self._problems = (*matrix.problems, *problems)
            self.version += 1
        for problem in self._problems:
            log.warning("personality matrix problem", path=str(self.path), problem=problem)
        log.info(
            "topics loaded",
            path=str(self.path),
            topics=len(self._order),
            problems=len(self._problems),
        )
        return self._problems

    def _load_bodies(self, matrix: Matrix) -> tuple[dict[str, Topic], list[str]]:
        topics: dict[str, Topic] = {}
        problems: list[str] = []
        for spec in matrix.topics:
            previous = self._topics.get(spec.id)
            try:
                raw = spec.file.read_text(encoding="utf-8")
                title, body = topic_body(raw)
                if not body:
                    raise ValueError("the file has no body")
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                why = _describe_read_error(exc)
                if previous is not None:
                    problems.append(
                        f"topic '{spec.id}': {spec.file} {why}; keeping its last good body"
                    )
                    topics[spec.id] = Topic(spec=spec, title=previous.title, body=previous.body)
                else:
                    problems.append(f"topic '{spec.id}': {spec.file} {why}; topic skipped")
                continue
            topics[spec.id] = Topic(spec=spec, title=spec.title or title or spec.id, body=body)
        return topics, problems

    # -- scoring ---------------------------------------------------------------------------

    def _point(self, point: str) -> TopicPoint:
        if point not in POINTS:
            raise ValueError(f"unknown injection point {point!r}; expected one of {list(POINTS)}")
        return getattr(self.settings, point)

    def score(self, point: str, text: str) -> list[TopicScore]:
        """Score every in-scope topic with at least one matching trigger, best first."""
        self._point(point)
        words = phrase_words(text)
        present = frozenset(words)
        out: list[TopicScore] = []
        for topic in self.topics:
            if point not in topic.spec.scope:
                continue
            hits = [t for t in topic.spec.triggers if t.matches(words, present)]
            if len(hits) == 1 and not _meant(hits[0], words, present):
                continue
            matched = tuple(t.text for t in hits)
            if not matched:
                continue
            overlap = len(matched)
            out.append(
                TopicScore(
                    id=topic.id,
                    score=overlap + topic.spec.priority * 0.5,
                    overlap=overlap,
                    priority=topic.spec.priority,
                    matched=matched,
                )
            )
        out.sort(key=lambda s: (-s.score, -s.overlap, s.id))
        return out

    def select(self, point: str, text: str, *, session_key: str | None = None) -> list[TopicScore]:
        """Choose the topics to inject at `point` for `text` (best first).

        With `session_key`, this call counts as one turn of that session: fresh matches reset
        their persistence, and topics chosen in the last `persist_turns` turns fill any free
        slots (marked `persisted`).
        """
        limits = self._point(point)
        ranked = self.score(point, text)
        chosen = [
            _with(s, selected=True, reason="matched") for s in ranked if s.score >= limits.min_score
        ][: limits.top_n]
        if session_key is None or self.settings.persist_turns <= 0:
            return chosen
        with self._lock:
            key = (session_key, point)
            state = self._memory.pop(key, {})
            self._memory[key] = state
            while len(self._memory) > _MAX_SESSIONS:
                self._memory.popitem(last=False)
            fresh = {s.id for s in chosen}
            for s in chosen:
                state[s.id] = (self.settings.persist_turns, s.score)
            lingering = sorted(
                (
                    (left, score, tid)
                    for tid, (left, score) in state.items()
                    if tid not in fresh
                    and tid in self._topics
                    and point in self._topics[tid].spec.scope
                ),
                key=lambda x: (-x[0], -x[1], x[2]),
            )
            for left, last_score, tid in lingering:
                if len(chosen) < limits.top_n:
                    spec = self._topics[tid].spec
                    chosen.append(
                        TopicScore(
                            id=tid,
                            score=last_score,
                            overlap=0,
                            priority=spec.priority,
                            matched=(),
                            selected=True,
                            persisted=True,
                            turns_left=left - 1,
                            reason=f"persisted from an earlier turn ({left - 1} more turns)",
                        )
                    )
                if left - 1 > 0:
                    state[tid] = (left - 1, last_score)
                else:
                    del state[tid]
            for tid in [t for t in state if t not in self._topics]:
                del state[tid]
        return chosen

    def explain(self, point: str, text: str, *, session_key: str | None = None) -> list[TopicScore]:
        """Every candidate with its score, marking what `select` chose and why the rest were not.

        This runs `select`, so with a `session_key` it counts as that session's turn.
        """
        limits = self._point(point)
        chosen = {s.id: s for s in self.select(point, text, session_key=session_key)}
        out: list[TopicScore] = []
        for s in self.score(point, text):
            if s.id in chosen:
                out.append(chosen.pop(s.id))
            elif s.score < limits.min_score:
                out.append(_with(s, reason=f"below min score {limits.min_score:g}"))
            else:
                out.append(_with(s, reason=f"outside top {limits.top_n}"))
        out.extend(chosen.values())
        return out

    # -- rendering -------------------------------------------------------------------------

    def body(self, topic_id: str) -> Topic | None:
        self._ensure_loaded()
        return self._topics.get(topic_id)

    def render(self, scores: list[TopicScore]) -> str:
        """Render chosen topics' bodies under `## Topic Addenda`, or "" when none."""
        parts = [render_topic(t) for s in scores if (t := self.body(s.id)) is not None]
        if not parts:
            return ""
        return ADDENDA_HEADING + "\n\n" + "\n\n".join(parts)

    def addenda(self, point: str, text: str, *, session_key: str | None = None) -> str:
        """The `## Topic Addenda` section for `text` at `point` ("" when nothing applies)."""
        return self.render(self.select(point, text, session_key=session_key))

    def forget(self, session_key: str) -> None:
        """Drop a session's persistence state (the session ended)."""
        with self._lock:
            for key in [k for k in self._memory if k[0] == session_key]:
                del self._memory[key]


def render_topic(topic: Topic) -> str:
    """One topic's addendum: its title as a sub-heading, then its body."""
    return f"### {topic.title}\n\n{topic.body}"


def _meant(trigger: Trigger, words: list[str], present: frozenset[str]) -> bool:
    """Say whether a lone trigger is meant in the topic's sense.

    An ambiguous word ("code" of a locker, "bug" that bit someone) counts alone only next to
    one of its sense cues; with a second trigger of the same topic it is supported anyway.
    """
    if trigger.senses is None:
        return True
    return any(cue.matches(words, present) for cue in trigger.senses)


def _with(score: TopicScore, **changes: object) -> TopicScore:
    return replace(score, **changes)  # type: ignore[arg-type]


def _describe_read_error(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "does not exist"
    if isinstance(exc, UnicodeDecodeError):
        return f"is not valid UTF-8 (byte {exc.start})"
    if isinstance(exc, OSError):
        return f"cannot be read ({exc.strerror or exc})"
    return str(exc)
