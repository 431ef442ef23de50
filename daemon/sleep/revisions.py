"""Reviewable changes to topic addenda and the personality matrix, proposed by dreams.

A revision is applied the way a careful person would: the guards run first (a revision that
would delete most of a file, that cites no memory, or that draws on memory of untrusted
origin is *rejected* and recorded with the reason); the previous version of every file is
kept in `dream_revisions` with a unified diff (also written to `dreams/revisions/<id>.diff`
and logged); `revert(id)` puts the previous version back. Ids are short and stable
(`d-` + 8 hex of cycle, kind and target), so a phase re-run after a crash finds its own
revision instead of applying it twice. The topic watcher reloads the router when the files
change; nothing here talks to the router.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from daemon.durable import write_atomic
from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.memory.api import UNTRUSTED_ORIGINS
from daemon.paths import Home
from daemon.store.db import Database
from daemon.store.dream_revisions import (
    DreamRevisionsRepo,
    FileChange,
    Revision,
    RevisionStatus,
)
from daemon.topics.matrix import MatrixError, parse_matrix, split_front_matter

log = get_logger("sleep.revisions")

_SHINGLE = 6  # words: a run this long copied from untrusted memory counts as drawing on it
_WORD = re.compile(r"[a-z0-9']+")
_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class RevisionError(ReverieError):
    """A revert (or a lookup) cannot be done; the message says why and what to do instead."""


@dataclass(frozen=True, kw_only=True)
class Proposal:
    """One change a dream proposes: a new text for a topic addendum, or a new topic."""

    kind: str  # addendum | new_topic
    target: str  # topic id
    text: str  # the addendum's full new text (or the new topic's body)
    why: str = ""
    sources: tuple[str, ...] = ()
    title: str = ""  # new topics
    triggers: tuple[str, ...] = ()  # new topics


@dataclass
class Material:
    """The memories a dream was shown, by uid: origin and text (for the provenance guards)."""

    origins: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def add(self, uid: str, origin: str, text: str) -> None:
        self.origins[uid] = origin
        self.texts[uid] = text


def revision_id(cycle_id: str, kind: str, target: str) -> str:
    return (
        "d-" + hashlib.blake2b(f"{cycle_id}\0{kind}\0{target}".encode(), digest_size=4).hexdigest()
    )


def unified_diff(changes: Sequence[FileChange]) -> str:
    out: list[str] = []
    for ch in changes:
        before = (ch.before or "").splitlines(keepends=True)
        after = (ch.after or "").splitlines(keepends=True)
        src = f"a/{ch.path}" if ch.before is not None else "/dev/null"
        dst = f"b/{ch.path}" if ch.after is not None else "/dev/null"
        for line in difflib.unified_diff(before, after, fromfile=src, tofile=dst):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def deleted_fraction(before: str, after: str) -> float:
    """The share of `before`'s non-blank lines that `after` no longer has."""
    old = [ln for ln in before.splitlines() if ln.strip()]
    if not old:
        return 0.0
    new = [ln for ln in after.splitlines() if ln.strip()]
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    kept = sum(block.size for block in matcher.get_matching_blocks())
    return 1.0 - kept / len(old)


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i : i + _SHINGLE]) for i in range(len(words) - _SHINGLE + 1)}


def _added_text(changes: Sequence[FileChange]) -> str:
    lines: list[str] = []
    for ch in changes:
        old = set((ch.before or "").splitlines())
        lines += [ln for ln in (ch.after or "").splitlines() if ln not in old]
    return "\n".join(lines)


def provenance_problem(
    proposal: Proposal, changes: Sequence[FileChange], material: Material
) -> str | None:
    """Why the revision may not draw on what it draws on (None when it may)."""
    if not proposal.sources:
        return "cites no memory: a revision must say which memories it draws on"
    for uid in proposal.sources:
        origin = material.origins.get(uid)
        if origin is None:
            return f"cites {uid}, which the dream was not shown"
        if origin in UNTRUSTED_ORIGINS:
            return f"draws on untrusted-origin memory {uid} ({origin})"
    added = _shingles(_added_text(changes))
    if added:
        for uid, origin in material.origins.items():
            if origin in UNTRUSTED_ORIGINS and added & _shingles(material.texts.get(uid, "")):
                return f"repeats text of untrusted-origin memory {uid} ({origin}) without citing it"
    return None


def _topic_ids(front: str) -> list[str]:
    try:
        data = json.loads(front)
    except ValueError:
        return []
    topics = data.get("topics") if isinstance(data, dict) else data
    return (
        [str(t.get("id")) for t in topics if isinstance(t, dict)]
        if isinstance(topics, list)
        else []
    )


def add_topic_to_matrix(matrix_text: str, entry: dict[str, Any], *, where: Path) -> str:
    """Insert one topic into the matrix's JSON front matter, keeping the rest of the file as written.

    The entry goes in as one line after the last topic; when the front matter is laid out so
    that this would not land in the topic list, the front matter is rewritten as indented JSON.
    """
    front, _ = split_front_matter(matrix_text, where=where.name)
    data = json.loads(front)
    if not isinstance(data, dict) or not isinstance(data.get("topics"), list):
        raise MatrixError(f'{where.name}: front matter must be a JSON object with a "topics" list')
    start = matrix_text.index(front)
    end = start + len(front)
    wanted = [*_topic_ids(front), entry["id"]]
    close = front.rstrip().rfind("]")
    last = front.rfind("}", 0, close)
    if data["topics"] and close != -1 and last != -1:
        new_front = (
            front[: last + 1]
            + ",\n    "
            + json.dumps(entry, ensure_ascii=False)
            + front[last + 1 :]
        )
        if _topic_ids(new_front) == wanted:
            return matrix_text[:start] + new_front + matrix_text[end:]
    rewritten = (
        json.dumps({**data, "topics": [*data["topics"], entry]}, indent=2, ensure_ascii=False)
        + "\n"
    )
    return matrix_text[:start] + rewritten + matrix_text[end:]


class RevisionStore:
    """Apply, reject, list and revert dream revisions over a home and its database."""

    def __init__(self, home: Home, db: Database, *, matrix_file: Path | None = None) -> None:
        self.home = home
        self.db = db
        self.matrix_file = matrix_file or home.matrix_file

    def _abs(self, rel: str) -> Path:
        return self.home.root / rel

    def _rel(self, path: Path) -> str:
        return str(path.resolve().relative_to(self.home.root.resolve()))

    # --- reading -------------------------------------------------------------------------
    async def get(self, rev_id: str) -> Revision | None:
        return await DreamRevisionsRepo(self.db).get(rev_id.strip())

    async def recent(self, *, limit: int = 100) -> list[Revision]:
        return await DreamRevisionsRepo(self.db).recent(limit)

    async def settle(self, cycle_id: str) -> list[Revision]:
        """Finish what a crash may have interrupted for a cycle's revisions; return them all.

        An applied revision whose files are still at their previous version is written (a
        re-run of the dream may not propose it again), and a missing diff file is rewritten.
        """
        revisions = await self.for_cycle(cycle_id)
        for revision in revisions:
            await self._settle(revision)
        return revisions

    async def _settle(self, revision: Revision) -> None:
        if revision.status == RevisionStatus.APPLIED:
            await anyio.to_thread.run_sync(self._finish_apply, revision)
        if not await anyio.Path(self._diff_path(revision)).exists():
            await anyio.to_thread.run_sync(self._write_diff, revision)

    async def for_cycle(self, cycle_id: str) -> list[Revision]:
        return await DreamRevisionsRepo(self.db).of_cycle(cycle_id)

    # --- proposing -----------------------------------------------------------------------
    def _changes(
        self, proposal: Proposal, topic_files: Mapping[str, Path]
    ) -> tuple[list[FileChange], str | None]:
        """The file changes a proposal means, or the reason it cannot mean any (blocking I/O)."""
        if proposal.kind == "addendum":
            path = topic_files.get(proposal.target)
            if path is None:
                return [], f"no topic {proposal.target!r} in the matrix"
            before = path.read_text(encoding="utf-8") if path.exists() else None
            after = proposal.text.strip() + "\n"
            return [FileChange(path=self._rel(path), before=before, after=after)], None
        if proposal.kind == "new_topic":
            tid = proposal.target
            if not _ID.match(tid):
                return [], f"topic id {tid!r} must be lowercase letters, digits, '-' or '_'"
            if tid in topic_files:
                return [], f"topic {tid!r} already exists; revise its addendum instead"
            triggers = [t for t in (" ".join(str(t).split()) for t in proposal.triggers) if t]
            if not triggers:
                return [], f"new topic {tid!r} has no triggers"
            body = proposal.text.strip()
            if not body:
                return [], f"new topic {tid!r} has an empty addendum"
            topic_path = self.home.topics_dir / f"{tid}.md"
            if topic_path.exists():
                return (
                    [],
                    f"topics/{tid}.md already exists (not in the matrix): a person's file is never overwritten",
                )
            title = " ".join(proposal.title.split()) or tid.replace("-", " ").capitalize()
            matrix_before = self.matrix_file.read_text(encoding="utf-8")
            entry = {
                "id": tid,
                "file": f"topics/{tid}.md",
                "priority": 1,
                "scope": "all",
                "triggers": triggers,
            }
            try:
                matrix_after = add_topic_to_matrix(matrix_before, entry, where=self.matrix_file)
                parsed = parse_matrix(matrix_after, path=self.matrix_file)
            except (MatrixError, ValueError) as exc:
                return [], f"the matrix cannot take topic {tid!r}: {exc}"
            if tid not in {t.id for t in parsed.topics}:
                problem = next((p for p in parsed.problems if tid in p), "it did not parse")
                return [], f"new topic {tid!r} is invalid: {problem}"
            return [
                FileChange(
                    path=self._rel(self.matrix_file), before=matrix_before, after=matrix_after
                ),
                FileChange(path=self._rel(topic_path), before=None, after=f"# {title}\n\n{body}\n"),
            ], None
        return [], f"unknown revision kind {proposal.kind!r}"

    async def propose(
        self,
        proposal: Proposal,
        *,
        cycle_id: str,
        now: datetime,
        material: Material,
        topic_files: Mapping[str, Path],
        max_delete_fraction: float,
        over_limit: bool = False,
    ) -> Revision | None:
        """Check and apply (or reject) one proposal; return its record, None when it changes nothing.

        Idempotent per (cycle, kind, target): a second call finds the first one's record
        (and finishes its file writes if a crash interrupted them).
        """
        rev_id = revision_id(cycle_id, proposal.kind, proposal.target)
        existing = await self.get(rev_id)
        if existing is not None:
            await self._settle(existing)
            return existing
        changes, problem = await anyio.to_thread.run_sync(self._changes, proposal, topic_files)
        if not changes and problem is None:
            return None
        if changes and all(ch.before == ch.after for ch in changes):
            return None
        if problem is None and over_limit:
            problem = "over the nightly revision limit ([sleep] dreams_max_revisions)"
        if problem is None:
            for ch in changes:
                if ch.before is not None and ch.after is not None:
                    gone = deleted_fraction(ch.before, ch.after)
                    if gone > max_delete_fraction:
                        problem = f"would delete {gone:.0%} of {ch.path} (limit {max_delete_fraction:.0%})"
                        break
        if problem is None:
            problem = provenance_problem(proposal, changes, material)
        status = RevisionStatus.REJECTED if problem else RevisionStatus.APPLIED
        reason = problem or proposal.why.strip()[:500]
        revision = Revision(
            id=rev_id, cycle_id=cycle_id, created_at=now.isoformat(timespec="seconds"), kind=proposal.kind,
            target=proposal.target, status=status, reason=reason, files=tuple(changes), diff=unified_diff(changes),
            sources=proposal.sources,
        )  # fmt: skip
        # The record (with the previous versions) is durable before any file changes.
        await DreamRevisionsRepo(self.db).add(revision)
        if status == RevisionStatus.APPLIED:
            await anyio.to_thread.run_sync(self._finish_apply, revision)
            log.info(
                "dream revision applied",
                id=rev_id,
                kind=proposal.kind,
                target=proposal.target,
                diff=revision.diff,
            )
        else:
            log.info(
                "dream revision rejected",
                id=rev_id,
                kind=proposal.kind,
                target=proposal.target,
                reason=reason,
            )
        await anyio.to_thread.run_sync(self._write_diff, revision)
        return revision

    def _finish_apply(self, revision: Revision) -> None:
        """Write each file still at its previous version (the others were written already).

        Last file first: a new topic's addendum exists before the matrix names it.
        """
        for ch in reversed(revision.files):
            path = self._abs(ch.path)
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == ch.before and ch.after is not None:
                write_atomic(path, ch.after)

    def _diff_path(self, revision: Revision) -> Path:
        return self.home.dreams_dir / "revisions" / f"{revision.id}.diff"

    def _write_diff(self, revision: Revision) -> None:
        header = f"# {revision.id} {revision.status}: {revision.kind} {revision.target} — {revision.reason}\n"
        write_atomic(
            self.home.dreams_dir / "revisions" / f"{revision.id}.diff", header + revision.diff
        )

    # --- reverting -----------------------------------------------------------------------
    async def revert(self, rev_id: str, *, now: datetime, force: bool = False) -> Revision:
        """Put back the previous version of every file a revision changed; mark it reverted.

        Raises `RevisionError` for an unknown id, a rejected or already reverted revision, or
        a file edited since (unless `force`).
        """
        revision = await self.get(rev_id)
        if revision is None:
            raise RevisionError(
                f"no dream revision {rev_id.strip()!r}; `reverie dreams` lists them"
            )
        if revision.status == RevisionStatus.REVERTED:
            raise RevisionError(f"{revision.id} was already reverted at {revision.reverted_at}")
        if revision.status == RevisionStatus.REJECTED:
            raise RevisionError(
                f"{revision.id} was rejected ({revision.reason}); it changed nothing to revert"
            )
        await anyio.to_thread.run_sync(self._restore, revision, force)
        at = now.isoformat(timespec="seconds")
        await DreamRevisionsRepo(self.db).mark_reverted(revision.id, at)
        log.info("dream revision reverted", id=revision.id, target=revision.target)
        return Revision(
            **{**revision.__dict__, "status": RevisionStatus.REVERTED, "reverted_at": at}
        )

    def _restore(self, revision: Revision, force: bool) -> None:
        current = {}
        for ch in revision.files:
            path = self._abs(ch.path)
            current[ch.path] = path.read_text(encoding="utf-8") if path.exists() else None
        if all(current[ch.path] == ch.before for ch in revision.files):
            return  # already restored (an interrupted revert)
        if not force:
            for ch in revision.files:
                if current[ch.path] not in (ch.after, ch.before):
                    raise RevisionError(
                        f"{ch.path} was edited after {revision.id}; revert by hand (the diff is in "
                        f"`reverie dreams --json`) or pass --force to overwrite the edit"
                    )
        # In order: the matrix stops naming a new topic before its addendum goes.
        for ch in revision.files:
            path = self._abs(ch.path)
            if ch.before is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, ch.before)
