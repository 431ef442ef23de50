"""What both chat clients share: their side lines (tools, forks, state changes and notices, dim
on a terminal) and the exit status of a message saved but not answered."""

from __future__ import annotations

from datetime import datetime
from typing import Any, TextIO

# `chat -m` exit status when the daemon went away after saving the message (EX_TEMPFAIL): the
# reply is owed, not lost, so a script should not send the message again.
EXIT_SAVED = 75


class Notes:
    """Show side information (tools, state) as dim one-liners, plain when not a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()

    def line(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.tty else f"[{text}]"

    def describe(self, frame: dict[str, Any]) -> str | None:
        kind = frame.get("type")
        if kind == "tool":
            phase = frame.get("phase", "")
            depth = int(frame.get("depth") or 0)
            if frame.get("name") == "fork":
                text = (
                    f"{'  ' * (depth - 1)}fork {frame.get('fork_id', '?')} (depth {depth}) {phase}"
                )
            elif frame.get("summary") and phase == "started":
                # One line per call, saying what it does; only a failure adds a second.
                text = f"{'  ' * depth}▸ {frame['summary']}" + (
                    f" in {frame['fork_id']}" if frame.get("fork_id") else ""
                )
            elif phase == "finished" and not frame.get("is_error"):
                return None
            else:
                text = f"{'  ' * depth}tool {frame.get('name', '?')} {phase}" + (
                    f" in {frame['fork_id']}" if frame.get("fork_id") else ""
                )
            if frame.get("is_error"):
                text += " (error)"
            if frame.get("detail"):
                text += f": {frame['detail']}"
            return self.line(text)
        if kind == "notice" and frame.get("quiet"):
            # A passing line (the heartbeat's): one dim line, its time and its text.
            text = " ".join(str(frame.get("text", "")).split())
            return self.line(f"{notice_heading(frame)} · {text}")
        if kind == "notice":
            return self.line(notice_heading(frame)) + "\n" + str(frame.get("text", ""))
        if kind == "state":
            text = f"state: {frame.get('state', '?')}"
            if frame.get("detail"):
                text += f" ({frame['detail']})"
            return self.line(text)
        return None


def notice_heading(frame: dict[str, Any]) -> str:
    """`reminder · 09:00 · 12 min late`: what a notice is and when, in this machine's time."""
    parts = [str(frame.get("kind") or "notice")]
    try:
        when = datetime.fromisoformat(str(frame.get("due_at") or frame.get("ts")))
        parts.append(when.astimezone().strftime("%a %H:%M"))
    except ValueError:
        pass
    late = float(frame.get("late_s") or 0)
    if late >= 60:
        parts.append(f"{round(late / 60)} min late" if late < 5400 else f"{late / 3600:.1f} h late")
    return " · ".join(parts)
