"""Every socket command's request class: what it parses from the wire's args, what it refuses.

The refusals are `ValueError`s with the sentence the gateway sends as `bad_args`; a wrong type
is refused with the same sentence the frame parser (`protocol.check_command_args`) uses, so
the person reads one message whichever of the two catches it. Over the real socket:
tests/test_facts_daemon.py (`test_every_command_refuses_bad_args_with_its_sentence`).
"""

from __future__ import annotations

from typing import Any

import pytest

from daemon.agent.gateway import CommandRequest
from daemon.chat.protocol import COMMAND_ARGS, ProtocolError, check_command_args
from daemon.commands import BATCH_QUERIES
from daemon.commands.types import (
    MemoryImportRequest,
    MemorySearchRequest,
    RecallRequest,
    RememberRequest,
)
from daemon.journal.commands import JournalRequest
from daemon.schedule.store import ScheduleError
from daemon.schedule.tools import ScheduleRequest
from daemon.sleep.commands import SleepRequest, SwitchRequest
from daemon.status import PingRequest, StatusRequest

REQUESTS: dict[str, type[CommandRequest]] = {
    "status": StatusRequest,
    "ping": PingRequest,
    "sleep": SleepRequest,
    "switch": SwitchRequest,
    "journal": JournalRequest,
    "schedule": ScheduleRequest,
    "memory_search": MemorySearchRequest,
    "memory_import": MemoryImportRequest,
    "remember": RememberRequest,
    "recall": RecallRequest,
}

# A value of the wrong JSON kind for each kind an argument may be.
WRONG = {"string": 7, "boolean": "yes", "integer": "5", "strings": ["a", 1]}
# Arguments that make each request valid, so only the one under test is wrong.
VALID: dict[str, dict[str, Any]] = {
    "memory_search": {"queries": ["tea"]},
    "remember": {"text": "the gate sticks"},
    "recall": {"query": "gate"},
    "schedule": {"action": "add", "when": "tomorrow at 9", "text": "tea"},
}


def test_every_command_the_protocol_describes_has_a_request_class() -> None:
    assert set(REQUESTS) == set(COMMAND_ARGS)


@pytest.mark.parametrize(
    ("command", "key", "kind"),
    [(c, k, kind) for c, spec in COMMAND_ARGS.items() for k, kind in spec.items()],
)
def test_a_wrong_type_is_refused_with_the_edges_sentence(command: str, key: str, kind: Any) -> None:
    args = {**VALID.get(command, {}), key: WRONG[kind]}
    with pytest.raises(ProtocolError) as edge:
        check_command_args(command, args)
    with pytest.raises(ValueError) as parsed:
        REQUESTS[command].from_args(args)
    assert str(parsed.value) == edge.value.message


@pytest.mark.parametrize("command", sorted(REQUESTS))
def test_nulls_and_unknown_arguments_are_ignored(command: str) -> None:
    base = VALID.get(command, {})
    nulls = {key: None for key in COMMAND_ARGS[command]}
    assert REQUESTS[command].from_args({**nulls, **base, "later": {"x": 1}}) == REQUESTS[
        command
    ].from_args(base)


def test_status_and_ping_take_nothing() -> None:
    assert StatusRequest.from_args({}) == StatusRequest()
    assert PingRequest.from_args({"verbose": True}) == PingRequest()


def test_sleep_waits_only_when_asked() -> None:
    assert SleepRequest.from_args({}).wait is False
    assert SleepRequest.from_args({"wait": True}).wait is True
    with pytest.raises(ValueError, match=r"^sleep: 'wait' must be a boolean, got a string$"):
        SleepRequest.from_args({"wait": "yes"})


def test_a_switch_reason_is_one_trimmed_line_with_a_default() -> None:
    assert SwitchRequest.from_args({}).reason == "requested by the person"
    assert SwitchRequest.from_args({"reason": ""}).reason == "requested by the person"
    assert SwitchRequest.from_args({"reason": "  new topic  "}).reason == "new topic"
    assert len(SwitchRequest.from_args({"reason": "x" * 500}).reason) == 200
    with pytest.raises(ValueError, match=r"^switch: 'reason' must be a string, got an array$"):
        SwitchRequest.from_args({"reason": ["a"]})


def test_journal_tail_and_day_are_checked_when_parsed() -> None:
    assert JournalRequest.from_args({}) == JournalRequest(tail=10, day=None)
    assert JournalRequest.from_args({"tail": 3, "day": "yesterday"}) == JournalRequest(
        tail=3, day="yesterday"
    )
    assert JournalRequest.from_args({"day": "2026-11-02"}).day == "2026-11-02"
    for tail in (0, -1, 10_001):
        with pytest.raises(ValueError) as refused:
            JournalRequest.from_args({"tail": tail})
        assert str(refused.value) == f"--tail must be between 1 and 10000, got {tail}"
    with pytest.raises(ValueError) as refused:
        JournalRequest.from_args({"day": "someday"})
    assert str(refused.value) == (
        "--day 'someday' is not a date (expected YYYY-MM-DD, 'today' or 'yesterday')"
    )
    with pytest.raises(ValueError, match=r"^journal: 'tail' must be an integer, got a boolean$"):
        JournalRequest.from_args({"tail": True})


def test_schedule_requests_by_action() -> None:
    assert ScheduleRequest.from_args({}) == ScheduleRequest(action="list")
    assert ScheduleRequest.from_args({"action": "list", "all": True}).all is True
    words = ScheduleRequest.from_args({"action": "add", "words": ["tomorrow", "tea"], "task": True})
    assert (words.words, words.task) == (("tomorrow", "tea"), True)
    apart = ScheduleRequest.from_args({"action": "add", "when": "at 9", "text": "tea"})
    assert (apart.words, apart.when, apart.text, apart.task) == (None, "at 9", "tea", False)
    assert ScheduleRequest.from_args({"action": "cancel", "id": "s-1"}).id == "s-1"
    # `words` belongs to `add`: another action ignores it, as it ignores `when`.
    assert ScheduleRequest.from_args({"action": "list", "words": 5}).words is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"action": "snooze"},
            "unknown schedule action 'snooze' (one of list, add, cancel, approve, decline)",
        ),
        ({"action": "add", "words": "tomorrow tea"}, "words must be a list of strings"),
        ({"action": "add", "words": ["at", 9]}, "words must be a list of strings"),
        ({"action": "add", "when": "tomorrow"}, "say when (a string) and the text (a string)"),
        ({"action": "add", "text": "tea"}, "say when (a string) and the text (a string)"),
        ({"action": 3}, "schedule: 'action' must be a string, got a number"),
    ],
)
def test_a_bad_schedule_request_is_a_schedule_error(args: dict[str, Any], message: str) -> None:
    # A ScheduleError (a ValueError): the CLI's direct path reports it as the daemon does.
    with pytest.raises(ScheduleError) as refused:
        ScheduleRequest.from_args(args)
    assert str(refused.value) == message


def test_memory_search_defaults_and_options() -> None:
    plain = MemorySearchRequest.from_args({"queries": ["tea", "gate"]})
    assert plain == MemorySearchRequest(queries=("tea", "gate"))
    assert (plain.k, plain.mode, plain.kinds, plain.include_retired, plain.raw) == (
        10,
        "hybrid",
        None,
        False,
        False,
    )
    full = MemorySearchRequest.from_args(
        {
            "queries": [],
            "k": 3,
            "mode": "lexical",
            "kinds": ["fact"],
            "include_retired": True,
            "raw": True,
        }
    )
    assert full == MemorySearchRequest(
        queries=(), k=3, mode="lexical", kinds=("fact",), include_retired=True, raw=True
    )
    # No kinds named means every kind.
    assert MemorySearchRequest.from_args({"queries": ["a"], "kinds": []}).kinds is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "memory_search needs 'queries': a list of strings"),
        (
            {"queries": ["q"] * (BATCH_QUERIES + 1)},
            f"memory_search takes at most {BATCH_QUERIES} queries per command",
        ),
        ({"queries": ["q"], "k": 0}, "k must be a positive number"),
        ({"queries": ["q"], "k": -4}, "k must be a positive number"),
        (
            {"queries": ["q"], "mode": "fuzzy"},
            "unknown search mode 'fuzzy'; use hybrid, lexical or vector",
        ),
    ],
)
def test_a_bad_memory_search_is_refused(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        MemorySearchRequest.from_args(args)
    assert str(refused.value) == message


def test_memory_import_keeps_a_bare_file_name_only() -> None:
    assert MemoryImportRequest.from_args({}) == MemoryImportRequest(name="import.jsonl")
    assert MemoryImportRequest.from_args({"name": "/etc/talk.jsonl"}).name == "talk.jsonl"
    for name in ("..", "", "a\nb", "x" * 300, "bad\udcff"):
        assert MemoryImportRequest.from_args({"name": name}).name == "import.jsonl"
    flags = MemoryImportRequest.from_args({"summarise": True, "no_embed": True})
    assert (flags.summarise, flags.no_embed) == (True, True)


def test_remember_reads_its_action_and_the_ids_as_the_person_writes_them() -> None:
    told = RememberRequest.from_args({"text": "  the  gate\nsticks ", "tags": ["home"]})
    assert (told.text, told.tags, told.target) == ("the gate sticks", ("home",), "memory")
    assert RememberRequest.from_args({"retract": "2", "reason": "moved"}) == RememberRequest(
        retract="fact:2", reason="moved"
    )
    assert RememberRequest.from_args({"restore": "[fact:3]"}).restore == "fact:3"
    assert RememberRequest.from_args({"pin": 4}).pin == "fact:4"
    corrected = RememberRequest.from_args({"correct": "shared:5", "text": "Friday"})
    assert (corrected.correct, corrected.text) == ("shared:5", "Friday")
    shared = RememberRequest.from_args({"text": "wifi on the fridge", "shared": True})
    assert shared.shared is True and shared.target == "memory"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "remember needs TEXT (or --retract ID)"),
        ({"text": "  \n "}, "remember needs TEXT (or --retract ID)"),
        ({"correct": "2"}, "remember needs TEXT (or --retract ID)"),
        ({"retract": "2", "text": "x"}, "--retract takes no TEXT; give the reason with --reason"),
        ({"restore": "2", "text": "x"}, "--restore takes no TEXT"),
        ({"pin": "2", "text": "x"}, "--pin takes no TEXT"),
        ({"text": 7}, "remember: 'text' must be a string, got a number"),
    ],
)
def test_a_bad_remember_is_refused(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        RememberRequest.from_args(args)
    assert str(refused.value) == message


def test_recall_needs_a_query() -> None:
    assert RecallRequest.from_args({"query": "  the gate "}) == RecallRequest(query="the gate")
    for args in ({}, {"query": ""}, {"query": " \t"}):
        with pytest.raises(ValueError, match=r"^recall needs a non-empty 'query'$"):
            RecallRequest.from_args(args)


@pytest.mark.parametrize("cls", sorted(set(REQUESTS.values()), key=lambda c: c.__name__))
def test_requests_are_frozen(cls: type[CommandRequest]) -> None:
    command = next(name for name, c in REQUESTS.items() if c is cls)
    request = cls.from_args(VALID.get(command, {}))
    field = next(iter(getattr(cls, "__dataclass_fields__", {})), None)
    if field is None:
        return
    with pytest.raises(AttributeError):
        setattr(request, field, None)
