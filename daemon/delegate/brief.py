"""What a fork reads and what it returns: the brief, the partial output, the rendered result.

The brief is the fork's one message: the framing line, its place in the tree, the objective
and the brief (plus notes `before_fork` handlers added). The result is what the parent's
`delegate` call returns; anything a limit or a failure cut short is marked as partial.
"""

from __future__ import annotations

from dataclasses import dataclass

from daemon.delegate.lineage import ForkStatus
from daemon.records import MessageRecord, Record, ToolResultRecord

FRAMING = "You are in focused task mode. Your objective is: {task}"
_PARTIAL_CHARS = 6000
_TOOL_CLIP = 400


@dataclass(frozen=True, kw_only=True)
class ForkOutcome:
    """How a fork ended, as its parent reads it."""

    fork_id: str
    depth: int
    status: ForkStatus
    text: str
    outcome: str | None = None
    artifacts: tuple[str, ...] = ()
    reason: str | None = None

    def render(self) -> str:
        head = (
            f"[fork {self.fork_id} · depth {self.depth} · {self.status}"
            + (f" · outcome {self.outcome}" if self.outcome else "")
            + "]"
        )
        if self.status == ForkStatus.COMPLETE:
            body = self.text
            if self.artifacts:
                body += "\n\nArtifacts:\n" + "\n".join(f"- {a}" for a in self.artifacts)
        elif self.status == ForkStatus.INCOMPLETE:
            body = (
                "The fork ended without calling task_complete; its last reply follows (unconfirmed):\n"
                + (self.text or "(no reply)")
            )
        elif self.status == ForkStatus.STOPPED:
            body = (
                f"PARTIAL OUTPUT — the fork was stopped: {self.reason}. What it produced before it stopped follows; "
                "it is incomplete and unverified.\n<<<PARTIAL\n"
                + (self.text or "(nothing yet)")
                + "\nPARTIAL>>>"
            )
        else:
            body = f"The fork failed: {self.reason}."
            if self.text:
                body += (
                    "\nWhat it produced before failing (partial, unverified):\n<<<PARTIAL\n"
                    + self.text
                    + "\nPARTIAL>>>"
                )
        return f"{head}\n{body}"


def brief_prompt(
    *, task: str, context: str, depth: int, max_depth: int, additions: list[tuple[str, str]]
) -> str:
    """The fork's first (and only) message: the framing line, its place, the brief."""
    can_delegate = depth < max_depth
    lines = [
        FRAMING.format(task=task),
        "",
        f"You are a fork at depth {depth} (at most {max_depth}): the same persona and memory, a clean context. "
        "You do not see the conversation that delegated this task; everything you were given is below.",
        "You may hand self-contained sub-tasks to a fork of your own with `delegate`."
        if can_delegate
        else "You are at the depth limit: `delegate` is not available, do the work yourself.",
        "When you are done, call `task_complete(summary, outcome, artifacts)` once: that is how your result "
        "reaches whoever delegated it. If you cannot finish, report what you have with outcome 'partial' or 'failed'.",
        "",
        "## Brief",
        context or "(no further context was given: the objective above is the whole brief)",
    ]
    if additions:
        lines += ["", "## Notes added before this fork started"]
        lines += [f"- [{source}] {text}" for source, text in additions]
    return "\n".join(lines)


def partial_output(records: list[Record], limit: int = _PARTIAL_CHARS) -> str:
    """What a fork produced so far: its replies and tool results, in order, the end kept."""
    parts: list[str] = []
    for rec in records:
        if isinstance(rec, MessageRecord) and rec.role == "assistant" and rec.content.strip():
            parts.append(rec.content.strip())
        elif isinstance(rec, ToolResultRecord) and rec.name != "task_complete":
            content = " ".join(rec.content.split())
            if len(content) > _TOOL_CLIP:
                content = content[: _TOOL_CLIP - 1] + "…"
            parts.append(f"({rec.name} → {'error: ' if rec.is_error else ''}{content})")
    text = "\n".join(parts)
    if len(text) > limit:
        text = "…" + text[-(limit - 1) :]
    return text
