"""How many sessions mention a fact: what the nightly pin pass weighs (`daemon.sleep.maintenance`).

A chunk mentions a fact when it holds `MENTION_SHARE` of the fact's words. A fact's first
scoring searches the whole index (its best 30 chunks); `Mentions` carries the sessions found
from night to night so that each later night reads only the chunks written since.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

from daemon.memory.lexical import lexical_searcher
from daemon.memory.query import fts_match, terms
from daemon.store.kv import KvRepo
from daemon.store.sleep_reads import SleepReads

if TYPE_CHECKING:
    from daemon.memory.facts import Fact
    from daemon.store.db import Database

MENTION_SHARE = 0.6  # a chunk mentions a fact when it holds this share of the fact's words


async def mentions_of(db: Database, fact: Fact) -> int:
    """How many sessions talk about the fact (lexically) besides the one it was told in."""
    return max(0, len(await _mentioning(db, fact)) - 1)


async def _mentioning(db: Database, fact: Fact) -> set[str]:
    """The sessions whose chunks hold `MENTION_SHARE` of the fact's words (the best 30 chunks)."""
    wanted = set(terms(fact.text))
    expr = fts_match(fact.text)
    if len(wanted) < 2 or expr is None:
        return set()
    # Straight to full text (no fusion, no hydration): a fact's first scoring; later nights
    # read only the chunks written since (`Mentions`).
    searcher = lexical_searcher(db)
    rows = await db.run(lambda conn: searcher.matching(conn, expr, kind="chunk", limit=30))
    return {
        row[0]
        for row in rows
        if row[0] and len(wanted & set(terms(row[1]))) >= MENTION_SHARE * len(wanted)
    }


_MENTIONS_KEY = "sleep.pin_mentions"


class Mentions:
    """The sessions that mention each fact, carried from night to night in `kv`.

    Scoring every unpinned fact against the whole index each night grew with the history
    twice over (more facts, each a full-text query over more chunks: 9 s a night at 1,000
    days of talk). A fact is searched in full once, when first scored; each later night adds
    the sessions among the chunks written since (the index's generation marks them), so a
    night reads the day, not the years. A reindex (a new `memory.epoch`) starts over.
    """

    def __init__(self, db: Database, *, epoch: str, upto: int, known: dict[str, set[str]],
                 fresh: list[tuple[str, frozenset[str]]], top: int) -> None:  # fmt: skip
        self.db = db
        self.epoch = epoch
        self.upto = upto
        self.known = known
        self.fresh = fresh  # (session, words) of each chunk written since `upto`
        self.top = top
        self.scored: dict[str, set[str]] = {}

    @classmethod
    async def load(cls, db: Database) -> Mentions:
        kv = await KvRepo(db).get_many(["memory.epoch", _MENTIONS_KEY])
        epoch = str(kv.get("memory.epoch", "0"))
        try:
            saved = json.loads(kv.get(_MENTIONS_KEY, "{}"))
            assert isinstance(saved, dict)
        except (ValueError, AssertionError):
            saved = {}  # unreadable: every fact is searched in full again, nothing worse
        reads = SleepReads(db)
        top = await reads.top_version()
        if saved.get("epoch") != epoch or not isinstance(saved.get("facts"), dict):
            return cls(db, epoch=epoch, upto=top, known={}, fresh=[], top=top)
        upto = int(saved.get("upto") or 0)
        known = {str(k): {str(s) for s in v} for k, v in saved["facts"].items()}
        fresh = [(c.session_id, frozenset(terms(c.text))) for c in await reads.chunks_since(upto)]
        return cls(db, epoch=epoch, upto=upto, known=known, fresh=fresh, top=top)

    async def of(self, fact: Fact) -> int:
        """How many sessions besides one mention `fact` (as `_mentions`)."""
        if fact.id in self.known:
            wanted = set(terms(fact.text))
            sessions = set(self.known[fact.id])
            if len(wanted) >= 2:
                need = MENTION_SHARE * len(wanted)
                sessions |= {sid for sid, words in self.fresh if len(wanted & words) >= need}
        else:
            sessions = await _mentioning(self.db, fact)
        self.scored[fact.id] = sessions
        return max(0, len(sessions) - 1)

    async def save(self, *, at: str) -> None:
        """Keep tonight's counts (the facts scored tonight) for the next night."""
        value = json.dumps(
            {"epoch": self.epoch, "upto": self.top,
             "facts": {k: sorted(v) for k, v in self.scored.items()}},
            separators=(",", ":"),
        )  # fmt: skip
        await KvRepo(self.db).put(_MENTIONS_KEY, value, at=datetime.fromisoformat(at))
