"""The personality matrix: which topic addenda exist, when they apply, and where.

`PERSONALITY_MATRIX.md` opens with JSON front matter between two `---` lines::

    ---
    {"topics": [{"id": "debugging", "file": "topics/debugging.md",
                 "triggers": ["bug", "stack trace"], "priority": 2, "scope": "all"}]}
    ---
    Prose for people: how to add a topic.

A matrix that cannot be read at all (no front matter, bad JSON, no topic list) raises
`MatrixError`; a single bad topic (unknown scope, no triggers, missing file) is reported as
a problem and skipped, so the rest keeps working. Triggers and queries go through the same
`tokenise`, so "dreams" in a message matches the trigger "dream".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POINTS: tuple[str, ...] = ("system_prompt", "recall_persona", "summary_persona")

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?[+#]*")
_KNOWN_KEYS = frozenset({"id", "file", "triggers", "priority", "scope", "title", "description"})
MAX_PRIORITY = 10.0

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each either else ever few for from further get gets got had
    hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him
    himself his how how's however i i'd i'll i'm i've if in into is isn't it it's its itself
    just let let's like may me might more most much must mustn't my myself need no nor not now
    of off on once only or other ought our ours ourselves out over own please quite rather
    really same shall shan't she she'd she'll she's should shouldn't so some such than that
    that's the their theirs them themselves then there there's these they they'd they'll
    they're they've this those though through thus to too under until up upon us very via was
    wasn't we we'd we'll we're we've were weren't what what's whatever when when's where
    where's whether which while who who's whom whose why why's will with within without won't
    would wouldn't yes yet you you'd you'll you're you've your yours yourself yourselves
    one two also ok okay thing things something anything going want wants make made
    """.split()
)


# Words that look inflected but are not ("embed" is not "emb" + "ed").
_UNINFLECTED = frozenset({"embed", "speed", "breed", "greed", "bless", "news", "series", "species", "lens", "gas", "bias", "always", "sometimes", "perhaps", "during", "thing", "spring", "string", "ceiling", "morning", "evening", "wedding"})


class MatrixError(Exception):
    """The matrix as a whole cannot be used; the message says where and why."""


def _stem(word: str) -> str:
    """Fold common English inflections so 'dreams', 'dreaming' and 'dreamed' meet 'dream'."""
    if word.endswith("'s"):
        word = word[:-2]
    if not word.isalpha() or len(word) <= 3 or word in _UNINFLECTED:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
        if word in _UNINFLECTED:
            return word
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("eed"):
            stem = word[: -len(suffix)]
            if stem[-1] == stem[-2] and stem[-1] not in "lsz":
                stem = stem[:-1]
            return stem
    if word.endswith("e") and len(word) >= 4:
        word = word[:-1]
    return word


def tokenise(text: str) -> list[str]:
    """Lowercase words of `text`, stop words removed, inflections folded, in order."""
    out: list[str] = []
    for raw in _WORD.findall(text.lower().replace("’", "'")):
        if raw in STOP_WORDS:
            continue
        stem = _stem(raw)
        if stem and stem not in STOP_WORDS:
            out.append(stem)
    return out


@dataclass(frozen=True, kw_only=True)
class Trigger:
    """One trigger as written, and the token set that must all appear for it to match."""

    text: str
    tokens: frozenset[str]


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
        raise MatrixError(f"{where}: no front matter; the file must start with a '---' line, then JSON, then '---'")
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
        raise ValueError(f"{where}: unknown scope {unknown}; use \"all\" or some of {list(POINTS)}")
    return frozenset(POINTS) if "all" in values else frozenset(values)


def _parse_triggers(raw: Any, where: str) -> tuple[Trigger, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{where}: 'triggers' must be a non-empty list of keywords")
    seen: set[frozenset[str]] = set()
    triggers: list[Trigger] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{where}: every trigger must be a non-empty string, got {item!r}")
        tokens = frozenset(tokenise(item))
        if not tokens:
            # A trigger made only of stop words would never match; say so rather than ignore it.
            raise ValueError(f"{where}: trigger {item!r} has only stop words and can never match")
        if tokens not in seen:
            seen.add(tokens)
            triggers.append(Trigger(text=item.strip(), tokens=tokens))
    return tuple(triggers)


def _resolve_file(raw: Any, base: Path, where: str) -> Path:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError(f"{where}: 'file' must be a path relative to the matrix, e.g. \"topics/x.md\"")
    rel = Path(raw.strip())
    if rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"{where}: 'file' {raw!r} must stay inside {base} (no absolute paths or '..')")
    return base / rel


def _parse_topic(raw: Any, index: int, base: Path, where: str) -> TopicSpec:
    here = f"{where}: topic #{index + 1}"
    if not isinstance(raw, dict):
        raise ValueError(f"{here}: must be a JSON object, got {type(raw).__name__}")
    topic_id = raw.get("id")
    if not isinstance(topic_id, str) or not _ID.match(topic_id):
        raise ValueError(f"{here}: 'id' must be lowercase letters, digits, '-' or '_' (got {topic_id!r})")
    here = f"{where}: topic '{topic_id}'"
    priority = raw.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int | float) or not 0 <= priority <= MAX_PRIORITY:
        raise ValueError(f"{here}: 'priority' must be a number from 0 to {MAX_PRIORITY:g} (got {priority!r})")
    title = raw.get("title", "")
    return TopicSpec(
        id=topic_id,
        file=_resolve_file(raw.get("file"), base, here),
        triggers=_parse_triggers(raw.get("triggers"), here),
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
        raise MatrixError(f"{where}: front matter is not valid JSON (line {exc.lineno + 1}, column {exc.colno}): {exc.msg}") from None
    raw_topics = data.get("topics") if isinstance(data, dict) else data
    if not isinstance(raw_topics, list):
        raise MatrixError(f"{where}: front matter must be a JSON object with a \"topics\" list")
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
