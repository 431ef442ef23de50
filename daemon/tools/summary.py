"""One line that says what a tool call does, for the person to read at a glance.

The chat client shows it beside each call (`run: git status`, `read_file: notes/todo.md
(lines 1-40)`) and an approval prompt leads with it. It is bounded, on one line, and masked
with the journal's redactor, because a command or a URL can carry a token and the line goes
to every client watching the turn.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Final

from daemon.redact import Redactor

# A summary is one line of a terminal, not a transcript.
MAX_SUMMARY_CHARS: Final = 160
# The argument each built-in tool is about; the rest follow it briefly, in `key=value` form.
_LEAD: Final = ("command", "path", "url", "pattern", "query", "task", "text")

_redactor = Redactor()


def visible(text: str, *, keep: str = "\n\t") -> str:
    """`text` with every control and format character written out (`\\x1b`, `\\u202e`).

    What a model wrote reaches a terminal in approval prompts and tool lines: an escape
    sequence could erase or recolour part of a command, a bidirectional override reorder it,
    so the person would approve something other than what runs. The characters in `keep`
    stay (line breaks and tabs, unless a name is shown: `keep=""`).
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch in keep or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp"):
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    return "".join(out)


def one_line(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """`text` on one line (line breaks shown as ⏎, control characters written out), cut to
    `limit` characters with an ellipsis."""
    flat = " ⏎ ".join(part.strip() for part in visible(text).strip().splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def bounded(text: str, limit: int) -> str:
    """`text` whole up to `limit` characters, else cut with a marker saying how much is left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[{len(text) - limit} more characters not shown]"


def masked_line(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """`text` as `one_line` shows it, secrets masked (for logs and frames)."""
    return one_line(_redactor.mask(text), limit)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _lines(arguments: dict[str, Any]) -> str:
    start, end = arguments.get("start_line"), arguments.get("end_line")
    if start is None and end is None:
        return ""
    return f" (lines {start if start is not None else 1}-{end if end is not None else 'end'})"


def summarise_call(name: str, arguments: Any, *, subject: str | None = None) -> str:
    """`name: what it acts on`, one line, bounded, secrets masked.

    `subject` is the tool's subject argument (`Tool.subject`) when known; otherwise the first
    of the usual ones present leads. Arguments that are not an object are shown as given.
    """
    if not isinstance(arguments, dict):
        shown = _value(arguments) if arguments not in (None, "") else ""
        return one_line(_redactor.mask(f"{name}: {shown}" if shown else name))
    lead = subject if subject in arguments else next((k for k in _LEAD if k in arguments), None)
    parts: list[str] = []
    if lead is not None:
        parts.append(_value(arguments[lead]) + (_lines(arguments) if lead == "path" else ""))
    shown_keys = {lead, "start_line", "end_line"} if lead == "path" else {lead}
    rest = [f"{k}={_value(v)}" for k, v in arguments.items() if k not in shown_keys]
    # Bulky arguments (a file's new content, an edit's strings) are named, not shown.
    rest = [r if len(r) <= 60 else r.split("=", 1)[0] + "=…" for r in rest]
    if rest and name not in ("run", "edit_file", "write_file"):
        parts.append(", ".join(rest) if lead is None else "(" + ", ".join(rest) + ")")
    body = " ".join(parts)
    return one_line(_redactor.mask(f"{name}: {body}" if body else name))
