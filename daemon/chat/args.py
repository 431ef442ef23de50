"""A socket command's arguments read off the wire, one typed getter per JSON kind.

The edge (`protocol.check_command_args`, against `protocol.COMMAND_ARGS`) and every command's
request class (its `from_args`, beside the system that answers the command) read arguments
through these, so a wrong type is refused with one sentence wherever it is caught:
`remember: 'text' must be a string, got a number`. `null` counts as absent. The getters raise
`ValueError`, which the gateway answers as `bad_args`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

from daemon.chat.wire import describe_json

# The JSON an argument may hold: "strings" is an array of strings.
ArgKind: TypeAlias = Literal["string", "boolean", "integer", "strings"]

KIND_NAMES: Final[Mapping[ArgKind, str]] = {
    "string": "a string",
    "boolean": "a boolean",
    "integer": "an integer",
    "strings": "an array of strings",
}


def fits(value: object, kind: ArgKind) -> bool:
    """Whether a (non-null) JSON value is of `kind`."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def wrong_type(command: str, key: str, kind: ArgKind, value: object) -> str:
    """The refusal of argument `key` of `command` holding `value` where `kind` is wanted."""
    return f"{command}: '{key}' must be {KIND_NAMES[kind]}, got {describe_json(value)}"


def _get(command: str, args: Mapping[str, Any], key: str, kind: ArgKind) -> Any:
    value = args.get(key)
    if value is not None and not fits(value, kind):
        raise ValueError(wrong_type(command, key, kind, value))
    return value


def string(command: str, args: Mapping[str, Any], key: str) -> str | None:
    """`args[key]` as a string, None when absent or null."""
    value: str | None = _get(command, args, key, "string")
    return value


def boolean(command: str, args: Mapping[str, Any], key: str) -> bool:
    """`args[key]` as a boolean, False when absent or null."""
    return _get(command, args, key, "boolean") is True


def integer(command: str, args: Mapping[str, Any], key: str) -> int | None:
    """`args[key]` as an integer (never a boolean), None when absent or null."""
    value: int | None = _get(command, args, key, "integer")
    return value


def strings(command: str, args: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    """`args[key]` as a tuple of strings, None when absent or null."""
    value: list[str] | None = _get(command, args, key, "strings")
    return None if value is None else tuple(value)
