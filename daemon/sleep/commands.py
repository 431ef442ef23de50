"""The `sleep` and `switch` socket commands' requests and results (the sleep cycle answers both).

Each request is a frozen dataclass parsed from the wire's `args` by `from_args`, which raises
`ValueError` for a wrong argument (the gateway answers `bad_args`); each result is a TypedDict,
the exact JSON object of the `result` frame. `SleepCycle.sleep_command` and `switch_command`
take and return them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self, TypedDict

from daemon.chat import args as wire

SWITCH_REASON = "requested by the person"
# A switch's reason is kept in the sessions' link and the journal: one line, not an essay.
MAX_SWITCH_REASON = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class SleepRequest:
    """`sleep`: start a cycle now; with `wait`, answer once it is done, with its outcome."""

    wait: bool = False

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        return cls(wait=wire.boolean("sleep", args, "wait"))


class SleepStarted(TypedDict):
    """The answer to `sleep` without `wait`: the cycle begun."""

    cycle_id: str
    reason: str
    started: bool
    session_id: str


class CycleResult(TypedDict):
    """What one cycle did, step by step (`CycleOutcome.to_json`): the answer to `sleep` with `wait`."""

    cycle_id: str
    reason: str
    old_session_id: str
    new_session_id: str | None
    woke_early: bool
    deferred: list[str]
    # Each step's row: its status and what it reported.
    steps: dict[str, dict[str, Any]]
    # How many changes of each kind the cycle's change set holds.
    changes: dict[str, int]


SleepResult = SleepStarted | CycleResult


@dataclass(frozen=True, kw_only=True, slots=True)
class SwitchRequest:
    """`switch`: move the trunk to a fresh session, for `reason` (one line)."""

    reason: str = SWITCH_REASON

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Self:
        given = wire.string("switch", args, "reason") or SWITCH_REASON
        return cls(reason=given.strip()[:MAX_SWITCH_REASON])


class SwitchResult(TypedDict):
    """The switch done: the session left, the one begun, why, and how long the trunk held."""

    previous_id: str
    session_id: str
    reason: str
    held_s: float
