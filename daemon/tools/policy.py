"""The permission policy: whether one tool call may run, must be asked about, or is refused.

Three sources decide, in order, and the first that has a say wins:

1. `[[permissions.rules]]` in reverie.toml — `tool` (a name or glob) and `match` (a glob
   against the call's subject: the command of `run`, the path of a file tool, the URL of
   `fetch_url`; `Tool.subject` names the argument). Among the rules that match, deny wins
   over ask over allow, so a broad allow never undoes a narrow deny.
2. The person's saved "always" answers (`SavedApprovals`, `<home>/permissions.toml`): allows
   only, and only where no configured rule spoke.
3. The tool's own default (`Tool.permission`): reading in the workspace allow, writing and
   running ask, fetching allow; an MCP tool's comes from its server's `permission`/`tools`.

A path is matched both as the workspace shows it (`notes/todo.md`) and as the absolute path
it resolves to, so `.git/*` and `*/.git/*` both do what they say. A glob's `*` crosses `/`
(fnmatch), and for a command an allow never crosses a shell operator the pattern does not
hold itself: `pytest*` allows `pytest -q`, not `pytest; rm -rf ~` — that one is asked.
"""

from __future__ import annotations

import fnmatch
import os
import threading
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from daemon.durable import write_atomic
from daemon.log import get_logger
from daemon.paths import Home
from daemon.settings import PermissionRule
from daemon.tools.patterns import escape_glob, subject_matches
from daemon.tools.registry import Decision, Tool, ToolError
from daemon.tools.workspace import Workspace

log = get_logger("tools.policy")

Source = Literal["rule", "saved", "default"]
_RANK: Final[dict[str, int]] = {"allow": 0, "ask": 1, "deny": 2}
# Tools whose subject is a path in the workspace (matched relative and absolute).
PATH_SUBJECTS: Final = frozenset({"path"})


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What the policy decided for one call, and which source decided it."""

    decision: Decision
    source: Source
    # The rule or saved answer that decided, as a person would write it (`run "git status"`).
    rule: str | None = None

    @property
    def why(self) -> str:
        if self.source == "rule":
            return f"rule {self.rule}"
        if self.source == "saved":
            return f"saved answer {self.rule}"
        return "the tool's default"


def describe_rule(tool: str, match: str, decision: str) -> str:
    """How a rule is named in refusals and logs: `[run "rm *"] deny`."""
    return f'[{tool} "{match}"] {decision}'


def subject_of(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """The value the rules' `match` globs are matched against, or None (the tool has none)."""
    if tool.subject is None:
        return None
    value = arguments.get(tool.subject)
    return value if isinstance(value, str) else None


def proposed_pattern(tool: Tool, arguments: dict[str, Any], workspace: Workspace | None) -> str:
    """The pattern an "always" answer saves: exactly this subject (glob characters escaped).

    Exact on purpose: `git *` would also allow `git push --force`, and a wider pattern is the
    person's to write as a rule. A path is saved as the workspace shows it; a tool without a
    subject (an MCP tool) is allowed as a whole ("*").
    """
    subject = subject_of(tool, arguments)
    if subject is None:
        return "*"
    if tool.subject in PATH_SUBJECTS and workspace is not None:
        try:
            subject = workspace.relative(workspace.resolve(subject, must_exist=False))
        except ToolError:
            pass
    return escape_glob(subject)


def _candidates(tool: Tool, subject: str, workspace: Workspace | None) -> list[str]:
    if tool.subject not in PATH_SUBJECTS or workspace is None:
        return [subject]
    try:
        real = workspace.resolve(subject, must_exist=False)
    except ToolError:
        # Outside the workspace: the tool refuses it anyway; the rules see what was asked.
        return [subject]
    return list(dict.fromkeys([workspace.relative(real), str(real), subject]))


def _matches(pattern: str, candidates: Sequence[str], *, decision: str, command: bool) -> bool:
    allow = decision == "allow"
    return any(subject_matches(pattern, v, allow=allow, command=command) for v in candidates)


@dataclass(frozen=True, kw_only=True)
class SavedRule:
    tool: str
    match: str
    saved_at: str = ""


class SavedApprovals:
    """The person's "always" answers, kept in `<home>/permissions.toml`.

    A TOML file beside reverie.toml rather than a table, because it is the person's own
    policy: they can read it, review it and revoke an answer with an editor (delete its
    `[[allow]]` block), and it has the shape of `[[permissions.rules]]`, so an entry can be
    moved into the config as it is. It is re-read whenever it changes on disk (one `stat`
    per decision), so an edit takes effect on the next call without a restart; every save
    replaces it atomically (fsynced), so a crash never leaves half an answer.
    """

    FILE_NAME: Final = "permissions.toml"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._rules: tuple[SavedRule, ...] = ()
        self._stamp: tuple[int, int] | None = None
        self._lock = threading.Lock()
        # A file that cannot be read is reported once per change, not on every call.
        self.problem: str | None = None

    @classmethod
    def for_home(cls, home: Home) -> SavedApprovals:
        return cls(home.root / cls.FILE_NAME)

    def rules(self) -> tuple[SavedRule, ...]:
        """The saved answers, as the file holds them now."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._rules, self._stamp, self.problem = (), None, None
            return ()
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp != self._stamp:
            self._rules = self._load()
            self._stamp = stamp
        return self._rules

    def _load(self) -> tuple[SavedRule, ...]:
        try:
            data = tomllib.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            # Nothing is allowed from a file that cannot be read: calls are asked again.
            self.problem = f"{self.path} cannot be read ({exc}); its saved answers are ignored"
            log.error("saved approvals unreadable", path=str(self.path), error=str(exc))
            return ()
        self.problem = None
        out = []
        for entry in data.get("allow", []):
            if (
                isinstance(entry, dict)
                and isinstance(entry.get("tool"), str)
                and isinstance(entry.get("match", "*"), str)
            ):
                out.append(
                    SavedRule(
                        tool=entry["tool"],
                        match=entry.get("match", "*"),
                        saved_at=str(entry.get("saved_at", "")),
                    )
                )
        return tuple(out)

    def save(self, tool: str, match: str, *, now: datetime | None = None) -> SavedRule:
        """Add an allow for `tool` calls whose subject matches `match`; durable on return."""
        with self._lock:
            current = self.rules()
            rule = SavedRule(
                tool=tool,
                match=match,
                saved_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
            )
            if any(r.tool == tool and r.match == match for r in current):
                return rule
            write_atomic(self.path, render_saved([*current, rule]), mode=0o600)
            self._stamp = None
            return rule

    def revoke(self, tool: str, match: str) -> bool:
        """Remove a saved answer; return whether there was one."""
        with self._lock:
            current = self.rules()
            kept = [r for r in current if not (r.tool == tool and r.match == match)]
            if len(kept) == len(current):
                return False
            write_atomic(self.path, render_saved(kept), mode=0o600)
            self._stamp = None
            return True


def _toml_string(text: str) -> str:
    # A TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML wants escaped.
    import json

    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def render_saved(rules: Sequence[SavedRule]) -> str:
    head = (
        '# The person\'s "always" answers to approval prompts, written by the daemon.\n'
        "# Each [[allow]] lets calls of `tool` whose subject matches `match` run unasked.\n"
        "# Delete a block to revoke it (the daemon re-reads this file when it changes).\n"
    )
    blocks = [
        f"\n[[allow]]\ntool = {_toml_string(r.tool)}\nmatch = {_toml_string(r.match)}\n"
        f"saved_at = {_toml_string(r.saved_at)}\n"
        for r in rules
    ]
    return head + "".join(blocks)


class PermissionPolicy:
    """Decides allow / ask / deny for a call: configured rules, saved answers, the default."""

    def __init__(
        self,
        rules: Sequence[PermissionRule],
        *,
        saved: SavedApprovals | None = None,
        workspace: Workspace | None = None,
    ) -> None:
        self.rules = tuple(rules)
        self.saved = saved
        self.workspace = workspace

    def decide(self, tool: Tool, arguments: dict[str, Any]) -> Verdict:
        subject = subject_of(tool, arguments)
        candidates = _candidates(tool, subject, self.workspace) if subject is not None else []
        command = tool.subject == "command"
        best: PermissionRule | None = None
        for rule in self.rules:
            if not fnmatch.fnmatchcase(tool.name, rule.tool):
                continue
            if rule.match != "*" and not (
                candidates
                and _matches(rule.match, candidates, decision=rule.decision, command=command)
            ):
                continue
            if best is None or _RANK[rule.decision] > _RANK[best.decision]:
                best = rule
        if best is not None:
            return Verdict(
                decision=best.decision,
                source="rule",
                rule=describe_rule(best.tool, best.match, best.decision),
            )
        if self.saved is not None:
            for saved in self.saved.rules():
                if not fnmatch.fnmatchcase(tool.name, saved.tool):
                    continue
                if saved.match == "*" or (
                    candidates
                    and _matches(saved.match, candidates, decision="allow", command=command)
                ):
                    return Verdict(
                        decision="allow",
                        source="saved",
                        rule=describe_rule(saved.tool, saved.match, "allow"),
                    )
        return Verdict(decision=tool.permission, source="default")
