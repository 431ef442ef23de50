"""The memory commands' requests and results: `memory_search`, `memory_import`, `remember`, `recall`.

Each request is a frozen dataclass whose `from_args` reads the wire's `args` object and
raises `ValueError` with the sentence the person reads (the gateway answers `bad_args`);
the CLI's direct path and the console parse their requests with the same classes, so a
refusal reads the same on every path. Each result is a TypedDict: the exact JSON object the
`result` frame carries. The other systems keep their command's classes beside the code that
answers it (`daemon.sleep.commands`, `daemon.journal.commands`, `daemon.schedule.tools`,
`daemon.status`): they sit below this package in the layer order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, Self, TypedDict, cast, get_args

from daemon.chat import args as wire
from daemon.commands import BATCH_QUERIES
from daemon.memory.ids import fact_uid
from daemon.memory.index import SearchMode

SEARCH_MODES: Final = get_args(SearchMode)


def search_mode(mode: str, k: int) -> SearchMode:
    """`mode` as a search mode, `k` checked; raise ValueError naming what is wrong (the socket
    command, the CLI's direct path and the console all search through these checks)."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"unknown search mode {mode!r}; use hybrid, lexical or vector")
    if k <= 0:
        raise ValueError("k must be a positive number")
    return cast(SearchMode, mode)


# -- memory_search -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class MemorySearchRequest:
    """`memory_search`: up to `BATCH_QUERIES` queries searched with the same options."""

    queries: tuple[str, ...]
    k: int = 10
    mode: SearchMode = "hybrid"
    kinds: tuple[str, ...] | None = None
    include_retired: bool = False
    raw: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        name = "memory_search"
        queries = wire.strings(name, args, "queries")
        if queries is None:
            raise ValueError("memory_search needs 'queries': a list of strings")
        if len(queries) > BATCH_QUERIES:
            raise ValueError(f"memory_search takes at most {BATCH_QUERIES} queries per command")
        k = wire.integer(name, args, "k")
        k = 10 if k is None else k
        mode = search_mode(wire.string(name, args, "mode") or "hybrid", k)
        return cls(
            queries=queries,
            k=k,
            mode=mode,
            kinds=wire.strings(name, args, "kinds") or None,
            include_retired=wire.boolean(name, args, "include_retired"),
            raw=wire.boolean(name, args, "raw"),
        )


class SearchHit(TypedDict):
    """One result in the `memory search --json` contract (`daemon.commands.ops.item_json`)."""

    kind: str
    id: str
    score: float
    text: str
    session: str | None
    message_ids: list[str]
    ts: str | None
    title: str
    origin: str
    source: str
    tags: list[str]
    # How well it matches the question (0–100), and whether it shares (almost) nothing with it.
    relevance: NotRequired[int]
    below_floor: NotRequired[bool]


class MemorySearchResult(TypedDict):
    """One list of hits per query, in the order of the queries."""

    results: list[list[SearchHit]]


# -- memory_import -------------------------------------------------------------------------


def import_name(raw: str | None) -> str:
    """The passed file's name as the import reports it: a bare file name, never a path."""
    import os

    name = os.path.basename(raw) if raw is not None else ""
    try:
        size = len(name.encode())
    except UnicodeEncodeError:  # a lone surrogate from the wire
        size = 0
    if name in (".", "..") or not 0 < size <= 255 or not name.isprintable():
        return "import.jsonl"
    return name


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryImportRequest:
    """`memory_import`: the file comes open with the frame; `name` is only how it is called."""

    name: str = "import.jsonl"
    summarise: bool = False
    no_embed: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        command = "memory_import"
        return cls(
            name=import_name(wire.string(command, args, "name")),
            summarise=wire.boolean(command, args, "summarise"),
            no_embed=wire.boolean(command, args, "no_embed"),
        )


class ImportResult(TypedDict):
    """What an import wrote (`reverie memory import` prints it)."""

    sessions: int
    messages: int
    already_present: int
    chunks: int
    summaries: int
    # The embedder's name, "deferred", "none (lexical only)" or "failed (why); …".
    embeddings: str
    seconds: float


# -- remember ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RememberRequest:
    """`remember`: store `text`, or correct, retract, restore or pin a fact, as the person.

    At most one of the ids acts, checked in the order retract, restore, pin, correct; the ids
    are spelt as the fact log spells them (`2` names `fact:2`, `daemon.memory.ids`).
    """

    text: str = ""
    target: str = "memory"
    tags: tuple[str, ...] = ()
    shared: bool = False
    correct: str | None = None
    retract: str | None = None
    restore: str | None = None
    pin: str | None = None
    reason: str = ""

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        name = "remember"
        text = " ".join((wire.string(name, args, "text") or "").split())
        retract, correct, restore = (
            _fact_id(wire.string(name, args, key)) for key in ("retract", "correct", "restore")
        )
        # `pin` is not typed at the edge: the ids a person gives are read as they are written.
        pin = _fact_id(args.get("pin"))
        if retract is not None:
            if text:
                raise ValueError("--retract takes no TEXT; give the reason with --reason")
        elif restore is not None:
            if text:
                raise ValueError("--restore takes no TEXT")
        elif pin is not None:
            if text:
                raise ValueError("--pin takes no TEXT")
        elif not text:
            raise ValueError("remember needs TEXT (or --retract ID)")
        return cls(
            text=text,
            target=wire.string(name, args, "target") or "memory",
            tags=wire.strings(name, args, "tags") or (),
            shared=bool(args.get("shared")),
            correct=correct,
            retract=retract,
            restore=restore,
            pin=pin,
            reason=wire.string(name, args, "reason") or "",
        )


def _fact_id(given: object) -> str | None:
    return None if given is None else fact_uid(given)


class FactChanged(TypedDict):
    """A fact retracted, restored or pinned."""

    status: Literal["retracted", "restored", "pinned"]
    id: str
    message: str


class FactTold(TypedDict):
    """A fact stored, found already known, or corrected (also a shared fact's change)."""

    status: str
    id: str
    text: str
    message: str
    similar_to: NotRequired[str | None]


RememberResult = FactChanged | FactTold


def fact_told(data: Mapping[str, Any]) -> FactTold:
    """A reply built by the memory system as a plain dict, checked to have a `FactTold`'s keys."""
    missing = {"status", "id", "text", "message"} - data.keys()
    if missing:
        raise TypeError(f"a remember reply lacks {sorted(missing)}: {dict(data)!r}")
    return cast(FactTold, dict(data))


# -- recall --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RecallRequest:
    """`recall`: answer `query` from memory the way the recall tool answers the agent."""

    query: str

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        query = (wire.string("recall", args, "query") or "").strip()
        if not query:
            raise ValueError("recall needs a non-empty 'query'")
        return cls(query=query)


class RecallSource(TypedDict):
    cite: str
    kind: str
    origin: str
    session: str | None
    title: str
    ts: str | None
    relevance: int | None


class RecallResult(TypedDict):
    """The recall tool's result as JSON, with the answer rendered as the agent reads it."""

    query: str
    answer: str
    planner: str
    synthesised: bool
    sources: list[RecallSource]
    text: str
