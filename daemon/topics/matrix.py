"""The personality matrix: which topic addenda exist, when they apply, and where.

`PERSONALITY_MATRIX.md` opens with JSON front matter between two `---` lines::

    ---
    {"topics": [{"id": "debugging", "file": "topics/debugging.md",
                 "triggers": ["bug", "stack trace"], "priority": 2, "scope": "all"}]}
    ---
    Prose for people: how to add a topic.

A matrix that cannot be read at all (no front matter, bad JSON, no topic list) raises
`MatrixError`; a single bad topic (unknown scope, no triggers, missing file) is reported as
a problem and skipped, so the rest keeps working. A trigger matches as a phrase: its words,
in order and adjacent, each in one of its inflected forms — "dreams" matches the trigger
"dream", but "burned out" never shrinks to "burned" nor "can't cope" to "cop".
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon.errors import ReverieError
from daemon.text import STOP_WORDS, stem

POINTS: tuple[str, ...] = ("system_prompt", "recall_persona", "summary_persona")

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?[+#]*")
_KNOWN_KEYS = frozenset(
    {"id", "file", "triggers", "ambiguous", "priority", "scope", "title", "description"}
)
MAX_PRIORITY = 10.0


class MatrixError(ReverieError):
    """The matrix as a whole cannot be used; the message says where and why."""


# An identifier joined by underscores (ANTHROPIC_API_KEY, user_id) is one token: its parts are
# not words the person said, so "API_KEY" in a reply must not trigger the topic about APIs.
_IDENTIFIER = re.compile(r"\b[A-Za-z0-9]+(?:_[A-Za-z0-9]+)+\b")


def _plain(text: str) -> str:
    return _IDENTIFIER.sub(lambda m: m.group(0).replace("_", ""), text).lower().replace("’", "'")


def tokenise(text: str) -> list[str]:
    """Lowercase words of `text`, stop words removed, inflections folded, in order."""
    out: list[str] = []
    for raw in _WORD.findall(_plain(text)):
        if raw in STOP_WORDS:
            continue
        folded = stem(raw)
        if folded and folded not in STOP_WORDS:
            out.append(folded)
    return out


def phrase_words(text: str) -> list[str]:
    """Lowercase words of `text` in order, stop words kept, apostrophes dropped ("can't" → "cant")."""
    return [w.replace("'", "") for w in _WORD.findall(_plain(text))]


_INFLECTED = ("s", "ing", "ed")


def forms(word: str) -> frozenset[str]:
    """The inflected forms a trigger word matches: "cope" → cope, copes, coped, coping.

    Forms are generated from the word as written, never by stemming the message, so two
    different words never collapse into one ("cope" does not match "cop", "code" not "cod").
    A trigger written inflected ("baking", "fails") also matches its root's forms.
    """
    out = set(_forms_of(word))
    if len(word) > 3 and word.isalpha() and word.endswith(_INFLECTED):
        root = stem(word)
        if root != word:
            out |= _forms_of(root) | _forms_of(root + "e")
    return frozenset(out)


def _forms_of(w: str) -> set[str]:
    if not w.isalpha() or len(w) < 3:
        return {w, w + "s"}
    out = {w, w + "s", w + "es"}
    if w.endswith("y") and w[-2] not in "aeiou":
        out |= {w[:-1] + "ies", w[:-1] + "ied"}
    if w.endswith("e"):
        out |= {w + "d", w[:-1] + "ing"}
    else:
        out |= {w + "ed", w + "ing"}
        if w[-1] not in "aeiouwxy" and w[-2] in "aeiou":
            out |= {w + w[-1] + "ed", w + w[-1] + "ing"}  # "stop" → "stopped"
    return out


@dataclass(frozen=True, kw_only=True)
class Trigger:
    """One trigger as written, matched as a phrase: its words, in order, next to each other."""

    text: str
    tokens: frozenset[str]
    words: tuple[frozenset[str], ...] = ()  # per position, the forms that word may take
    # Set for a word everyday talk also uses in another sense ("code" of a locker): the cues
    # that say the topic's sense is meant. See `ambiguous`.
    senses: tuple[Trigger, ...] | None = None

    @property
    def ambiguous(self) -> bool:
        """True when the trigger counts only with support: a sense cue or another trigger."""
        return self.senses is not None

    @property
    def key(self) -> tuple[str, ...]:
        """The phrase with each word folded: two triggers with one key are one trigger ("fails", "failing")."""
        return tuple(stem(w) for w in phrase_words(self.text))

    def matches(self, words: Sequence[str], present: Collection[str]) -> bool:
        """True when the trigger occurs in `words` (the message's `phrase_words`; `present` is their set)."""
        if not self.words or not any(f in present for f in self.words[0]):
            return False
        if len(self.words) == 1:
            return True
        n = len(self.words)
        return any(
            all(words[i + j] in self.words[j] for j in range(n))
            for i in range(len(words) - n + 1)
            if words[i] in self.words[0]
        )


@dataclass(frozen=True, kw_only=True)
class TopicSpec:
    """One topic as declared in the matrix (its body is loaded separately)."""

    id: str
    file: Path
    triggers: tuple[Trigger, ...]
    priority: float
    scope: frozenset[str]
    title: str = ""


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """A parsed matrix: the usable topics, in file order, and what was wrong with the rest."""

    path: Path
    topics: tuple[TopicSpec, ...]
    problems: tuple[str, ...] = ()
    prose: str = field(default="", repr=False)


def split_front_matter(text: str, *, where: str) -> tuple[str, str]:
    """Return (front matter, rest) of a document that opens with `---` … `---`."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start >= len(lines) or lines[start].strip() != "---":
        raise MatrixError(
            f"{where}: no front matter; the file must start with a '---' line, then JSON, then '---'"
        )
    for end in range(start + 1, len(lines)):
        if lines[end].strip() == "---":
            return "".join(lines[start + 1 : end]), "".join(lines[end + 1 :])
    raise MatrixError(f"{where}: front matter is not closed; add a '---' line after the JSON")


def _parse_scope(raw: Any, where: str) -> frozenset[str]:
    if raw is None or raw == "all":
        return frozenset(POINTS)
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{where}: 'scope' must be \"all\" or a list of {list(POINTS)}")
    unknown = sorted(set(values) - set(POINTS) - {"all"})
    if unknown:
        raise ValueError(f'{where}: unknown scope {unknown}; use "all" or some of {list(POINTS)}')
    return frozenset(POINTS) if "all" in values else frozenset(values)


def _mark_ambiguous(triggers: tuple[Trigger, ...], raw: Any, where: str) -> tuple[Trigger, ...]:
    """Attach each ambiguous trigger's sense cues: {"code": ["program", "compile"], ...}."""
    if not isinstance(raw, dict):
        raise ValueError(
            f"{where}: 'ambiguous' must map a trigger to its sense cues, "
            'e.g. {"code": ["program", "compile"]}'
        )
    by_text = {t.text.lower(): t for t in triggers}
    out = {t.text: t for t in triggers}
    for word, cues in raw.items():
        trigger = by_text.get(str(word).strip().lower())
        if trigger is None:
            raise ValueError(f"{where}: ambiguous word {word!r} is not one of the topic's triggers")
        if not isinstance(cues, list):
            raise ValueError(f"{where}: the sense cues of {word!r} must be a list of keywords")
        senses = _parse_triggers(cues, f"{where}: sense cues of {word!r}", empty_ok=True)
        out[trigger.text] = replace(trigger, senses=senses)
    return tuple(out.values())


def _parse_triggers(raw: Any, where: str, *, empty_ok: bool = False) -> tuple[Trigger, ...]:
    if not isinstance(raw, list) or not (raw or empty_ok):
        raise ValueError(f"{where}: 'triggers' must be a non-empty list of keywords")
    seen: set[tuple[str, ...]] = set()
    triggers: list[Trigger] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{where}: every trigger must be a non-empty string, got {item!r}")
        tokens = frozenset(tokenise(item))
        if not tokens:
            # A trigger made only of stop words would never match; say so rather than ignore it.
            raise ValueError(f"{where}: trigger {item!r} has only stop words and can never match")
        trigger = Trigger(
            text=item.strip(), tokens=tokens, words=tuple(forms(w) for w in phrase_words(item))
        )
        if trigger.key not in seen:
            seen.add(trigger.key)
            triggers.append(trigger)
    return tuple(triggers)


def _resolve_file(raw: Any, base: Path, where: str) -> Path:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(
            f"{where}: 'file' must be a path relative to the matrix, e.g. \"topics/x.md\""
        )
    rel = Path(raw.strip())
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(
            f"{where}: 'file' {raw!r} must stay inside {base} (no absolute paths or '..')"
        )
    return base / rel


def _parse_topic(raw: Any, index: int, base: Path, where: str) -> TopicSpec:
    here = f"{where}: topic #{index + 1}"
    if not isinstance(raw, dict):
        raise ValueError(f"{here}: must be a JSON object, got {type(raw).__name__}")
    topic_id = raw.get("id")
    if not isinstance(topic_id, str) or not _ID.match(topic_id):
        raise ValueError(
            f"{here}: 'id' must be lowercase letters, digits, '-' or '_' (got {topic_id!r})"
        )
    here = f"{where}: topic '{topic_id}'"
    priority = raw.get("priority", 0)
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int | float)
        or not 0 <= priority <= MAX_PRIORITY
    ):
        raise ValueError(
            f"{here}: 'priority' must be a number from 0 to {MAX_PRIORITY:g} (got {priority!r})"
        )
    title = raw.get("title", "")
    triggers = _parse_triggers(raw.get("triggers"), here)
    return TopicSpec(
        id=topic_id,
        file=_resolve_file(raw.get("file"), base, here),
        triggers=_mark_ambiguous(triggers, raw.get("ambiguous", {}), here),
        priority=float(priority),
        scope=_parse_scope(raw.get("scope", "all"), here),
        title=title if isinstance(title, str) else "",
    )


def parse_matrix(text: str, *, path: Path) -> Matrix:
    """Parse matrix text; raise `MatrixError` when unusable, collect per-topic problems."""
    where = path.name
    front, prose = split_front_matter(text, where=where)
    try:
        data = json.loads(front)
    except json.JSONDecodeError as exc:
        raise MatrixError(
            f"{where}: front matter is not valid JSON (line {exc.lineno + 1}, column {exc.colno}): {exc.msg}"
        ) from None
    raw_topics = data.get("topics") if isinstance(data, dict) else data
    if not isinstance(raw_topics, list):
        raise MatrixError(f'{where}: front matter must be a JSON object with a "topics" list')
    topics: list[TopicSpec] = []
    problems: list[str] = []
    ids: set[str] = set()
    for index, raw in enumerate(raw_topics):
        try:
            spec = _parse_topic(raw, index, path.parent, where)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if spec.id in ids:
            problems.append(f"{where}: topic '{spec.id}' is declared twice; the first one is used")
            continue
        extra = sorted(set(raw) - _KNOWN_KEYS)
        if extra:
            problems.append(f"{where}: topic '{spec.id}' has unknown keys {extra} (ignored)")
        ids.add(spec.id)
        topics.append(spec)
    return Matrix(path=path, topics=tuple(topics), problems=tuple(problems), prose=prose)


def read_matrix(path: Path) -> Matrix:
    """Read and parse the matrix file; raise `MatrixError` with one actionable line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"{path}: the personality matrix does not exist") from None
    except UnicodeDecodeError as exc:
        raise MatrixError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    except OSError as exc:
        raise MatrixError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_matrix(text, path=path)


def topic_body(text: str) -> tuple[str, str]:
    """Split a topic file into (title, body): drop optional front matter, lift the first heading."""
    stripped = text.lstrip("\ufeff")
    if stripped.lstrip().startswith("---"):
        try:
            _, stripped = split_front_matter(stripped, where="topic")
        except MatrixError:
            pass
    lines = stripped.strip().splitlines()
    title = ""
    if lines and lines[0].startswith("#"):
        title = lines[0].lstrip("#").strip()
        lines = lines[1:]
    return title, "\n".join(lines).strip()
