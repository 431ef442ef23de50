"""A running fork: the limits its tree shares, its place in the tree, and its relay to the turn
the person is waiting on (what it shows there, and the inactivity clock that stops it).

`daemon.delegate.fork` starts forks and runs them; these are the pieces each run carries.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import anyio

from daemon.agent.turns import Delta, Phase, ToolPhase, TurnEvent
from daemon.models.base import Usage
from daemon.tools.registry import ToolContext


@dataclass
class ForkTree:
    """The limits one trunk `delegate` call and every fork under it share."""

    root_session_id: str
    deadline: float  # anyio time at which the whole tree is stopped
    token_budget: int
    tokens: int = 0

    def charge(self, usage: Usage) -> str | None:
        """Add one model step's tokens; return why the tree must stop, or None."""
        self.tokens += usage.prompt_tokens + usage.output_tokens
        if self.tokens >= self.token_budget:
            return f"the fork tree's token budget is spent ({self.tokens:,} of {self.token_budget:,} tokens)"
        return None


@dataclass
class ForkRun:
    """One running fork: its place in the tree and what it has used."""

    id: str
    depth: int
    task: str
    tree: ForkTree
    # The sessions above it, trunk first: their memories stay out of its context.
    ancestors: tuple[str, ...]
    tokens: int = 0
    # When its lineage row says it started (the transcript's header repeats it).
    started_at: str = ""
    # The tools it was granted (names): its own forks can be granted these at most.
    granted: tuple[str, ...] = ()


class SpokenLines:
    """A fork's streamed text cut into whole lines, each shown as one progress frame.

    A line longer than `width` is cut at its last space before it (or at `width`).
    """

    def __init__(self, width: int = 200) -> None:
        self.width = width
        self._buf = ""

    def feed(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        while True:
            cut = self._buf.find("\n")
            if cut < 0 and len(self._buf) <= self.width:
                return out
            if cut < 0 or cut > self.width:
                space = self._buf.rfind(" ", 0, self.width + 1)
                cut = space if space > 0 else self.width
            line, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip(" \n")
            if line:
                out.append(line)

    def flush(self) -> list[str]:
        rest, self._buf = self._buf.strip(), ""
        return [rest] if rest else []


class ForkRelay:
    """What a running fork shows its parent's turn, and the clock that stops it.

    Every event the fork's loop reports (its tool phases, its words a line at a time) goes to
    the turn the person is waiting on, tagged with the fork; any activity, and every model
    step charged to the tree, moves the inactivity deadline on (never past the tree's).
    """

    def __init__(self, run: ForkRun, ctx: ToolContext, inactivity_s: float) -> None:
        self.run = run
        self.parent_observer = ctx.observer
        self.parent_turn = ctx.turn_id
        self.inactivity_s = inactivity_s
        self.scope = anyio.CancelScope(deadline=self._deadline())
        self.spoken = SpokenLines()

    def _deadline(self) -> float:
        return min(self.run.tree.deadline, anyio.current_time() + self.inactivity_s)

    def alive(self) -> None:
        self.scope.deadline = self._deadline()

    def shown(self, phase: Phase, detail: str) -> None:
        """A `fork` tool frame under the turn the person is waiting on."""
        self.parent_observer(
            ToolPhase(
                turn_id=self.parent_turn,
                name="fork",
                phase=phase,
                depth=self.run.depth,
                fork_id=self.run.id,
                detail=detail,
            )
        )

    def say(self, lines: list[str]) -> None:
        for line in lines:
            self.shown("progress", line)

    def relay(self, event: TurnEvent) -> None:
        self.alive()
        if isinstance(event, ToolPhase):
            if event.depth == self.run.depth and event.phase == "started":
                self.say(self.spoken.flush())  # what it said before calling the tool
            # Shown under the turn the person is waiting on, tagged with the fork it came from.
            self.parent_observer(
                dataclasses.replace(
                    event, turn_id=self.parent_turn, fork_id=event.fork_id or self.run.id
                )
            )
        elif isinstance(event, Delta):
            # Its own words, live, a line at a time (as `progress` tool frames).
            self.say(self.spoken.feed(event.text))

    def charge(self, usage: Usage) -> str | None:
        self.run.tokens += usage.prompt_tokens + usage.output_tokens
        self.alive()
        return self.run.tree.charge(usage)
