"""The chat client's side of approvals: `--approve` patterns, and a question shown to the person.

`reverie chat -m` cannot ask anyone, so it answers an `approval` of its own turn at once:
yes when an `--approve` pattern covers the call, otherwise no. A pattern is `TOOL` (every
call of that tool) or `TOOL:GLOB` (calls whose subject — the command, the path, the URL —
matches the glob, as `[[permissions.rules]]` match). There is no `--approve all`, and a bare
`*` is refused: a script says which tools it lets run; a standing allow belongs in the
config, where it is reviewed. `reverie chat` shows the question inline and reads y / n / a.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from daemon.tools.patterns import subject_matches, unescape_glob
from daemon.tools.summary import visible

# What `run` calls its subject; an allow for a command keeps to its shell operators.
_COMMAND_TOOLS = frozenset({"run"})
ANSWERS = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "a": "always", "always": "always"}
PROMPT = "allow? [y]es / [n]o / [a]lways: "


@dataclass(frozen=True)
class PreApproval:
    """One `--approve` pattern."""

    tool: str
    match: str | None

    @classmethod
    def parse(cls, text: str) -> PreApproval:
        """`TOOL` or `TOOL:GLOB`; ValueError (a message for the person) otherwise."""
        tool, sep, match = text.partition(":")
        tool = tool.strip()
        if not tool:
            raise ValueError(f"--approve {text!r}: name a tool, as TOOL or TOOL:GLOB")
        if tool in ("*", "all") and not sep:
            raise ValueError(
                f"--approve {text!r}: name the tools a script may run unasked "
                "(a standing allow for everything belongs in [[permissions.rules]])"
            )
        if sep and not match:
            raise ValueError(f"--approve {text!r}: the pattern after ':' is empty")
        return cls(tool=tool, match=match if sep else None)

    def covers(self, frame: dict[str, Any]) -> bool:
        tool = str(frame.get("tool") or "")
        if not fnmatch.fnmatchcase(tool, self.tool):
            return False
        if self.match is None:
            return True
        # The subject as the model gave it, and as the daemon resolved it (a path in the
        # workspace, shown in the proposed pattern).
        values = [str(v) for v in (frame.get("subject"),) if v is not None]
        pattern = frame.get("pattern")
        command = tool in _COMMAND_TOOLS
        if isinstance(pattern, str) and pattern != "*" and not command:
            values.append(unescape_glob(pattern))
        return any(subject_matches(self.match, v, allow=True, command=command) for v in values)

    def __str__(self) -> str:
        return self.tool if self.match is None else f"{self.tool}:{self.match}"


def parse_pre_approvals(texts: list[str] | None) -> list[PreApproval]:
    return [PreApproval.parse(t) for t in texts or []]


def pre_approved(frame: dict[str, Any], approvals: list[PreApproval]) -> PreApproval | None:
    """The first `--approve` pattern that covers the call the `approval` frame asks about."""
    return next((a for a in approvals if a.covers(frame)), None)


def question(frame: dict[str, Any]) -> list[str]:
    """The lines that show an approval: what would run, its preview, and what always saves.

    Everything the model wrote is shown with its control characters written out (`visible`),
    so no escape sequence can hide or rewrite part of what the person approves.
    """
    tool = visible(str(frame.get("tool", "?")))
    subject = frame.get("subject")
    lines = [f"── approval: {visible(str(frame.get('summary') or tool))}"]
    if subject is not None:
        first, *rest = visible(str(subject)).split("\n")
        lines.append(f"   {tool} wants to act on: {first}")
        lines += [f"   … {line}" for line in rest]
    preview = visible(str(frame.get("preview") or "")).rstrip("\n")
    if preview:
        lines += ["   " + line for line in preview.split("\n")]
    pattern = visible(str(frame.get("pattern", "*")))
    lines.append(
        f"   (always = let {tool} calls matching {pattern!r} run unasked; "
        f"no answer within {frame.get('timeout_s', '?')} s is a no)"
    )
    return lines


def parse_answer(text: str) -> str | None:
    """`yes` / `no` / `always` for what the person typed, or None to ask again."""
    return ANSWERS.get(text.strip().lower())
