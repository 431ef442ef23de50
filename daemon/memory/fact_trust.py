"""Whose word may write, change or pin a fact: the one trust rule every fact write asks.

Every fact records the origin of its text (`ORIGINS`). Origins rank by how far the daemon can
vouch for the words (`RANK`): the person's own word first; the agent's inference and the
system's (sleep) next; text from outside the conversation — a tool's output, a page, a file,
an import (`UNTRUSTED_ORIGINS`) — last. What each act needs (`refusal`):

| act         | who may                                              | asked by                  |
|-------------|------------------------------------------------------|---------------------------|
| `add`       | any origin; the profile never takes untrusted text   | `remember`, mined facts   |
| `supersede` | a word at least as trusted as the fact's own, never  | a told or mined change,   |
|             | untrusted text over a profile fact                   | a told fact over a mined  |
| `amend`     | any origin, but untrusted text never touches a       | `correct`, `retract`,     |
|             | profile fact                                         | `restore`, `reinstate`    |
| `pin`       | the person alone, and never a fact that is untrusted | `pin`, the log's replay   |
|             | text                                                 |                           |

An explicit correction by id (`amend`) is a decision, by the person or by the agent acting
on the turn's words, and carries that turn's origin (`daemon.agent.provenance`); an implicit
change (`supersede`: a new value said of a known key) has no id to decide on, so it must be
at least as trusted as the value it replaces. A proposal to pin (`propose_pin`, sleep's) changes
nothing by itself: it asks the person, whose `pin` the rule decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from daemon.records import UNTRUSTED_ORIGINS

if TYPE_CHECKING:
    from daemon.memory.fact_log import Fact

Act = Literal["add", "supersede", "amend", "pin"]
ORIGINS: tuple[str, ...] = ("person", "agent", "tool", "system", "import")
# Lower is more trusted; an origin not named ranks with untrusted text.
RANK: dict[str, int] = {"person": 0, "system": 1, "agent": 1, "tool": 2, "import": 2}
_LEAST = max(RANK.values())


def untrusted(origin: str) -> bool:
    """True for text from outside the conversation (a tool's output, a page, an import)."""
    return origin in UNTRUSTED_ORIGINS


def refusal(act: Act, origin: str, *, fact: Fact | None = None, target: str = "") -> str | None:
    """Why `origin`'s word may not do `act` to `fact` (or, adding, into `target`); None: it may.

    The reason is one line for the person or the model, starting "refused:" where the request
    itself is refused (`FactError`); `supersede` callers report it as a fact left standing.
    """
    into = fact.target if fact is not None else target
    if act == "pin":
        if origin != "person":
            return f"only the person can confirm a pin, not origin {origin!r}"
        if fact is not None and untrusted(fact.origin):
            return (
                f"refused: {fact.id} came from {fact.origin!r} text, which is never pinned; "
                "if it holds, say it yourself: reverie remember TEXT"
            )
        return None
    if act == "supersede" and fact is not None and outranked(origin, fact.origin):
        return (
            f"{fact.id} ({fact.text!r}) holds this, on the {fact.origin}'s word, "
            f"which {origin!r} text does not change"
        )
    if into == "profile" and untrusted(origin):
        if act == "add":
            return (
                f"refused: content from {origin!r} is untrusted and cannot go into the profile; "
                "store it with target 'memory' instead"
            )
        return f"refused: content from {origin!r} is untrusted and cannot change the profile"
    return None


def allows(act: Act, origin: str, *, fact: Fact | None = None, target: str = "") -> bool:
    """`refusal` as a yes/no, for a path that falls back rather than refuses."""
    return refusal(act, origin, fact=fact, target=target) is None


def outranked(origin: str, other: str) -> bool:
    """True when `origin`'s word is less trusted than `other`'s."""
    return RANK.get(origin, _LEAST) > RANK.get(other, _LEAST)
