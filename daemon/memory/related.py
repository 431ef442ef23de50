"""Words of the store that stand in for a question's words: "driving" finds "car".

A person asks about their life in other words than they told it: "what are we driving these
days?" for "the new family car is a Volvo V60", "who's my employer now?" for "I accepted the
job offer from Quillmate", "who's renovating our cooking space?" for "the kitchen job goes to
Hearth Works". Sentence vectors rank such a memory low when the sentence around the shared
meaning differs (MiniLM: 0.25–0.35 against the 0.45 floor, behind hundreds of everyday
chunks in a home of three years), and no word is shared for BM25 or the relevance floor.

The embedder relates the words themselves well (MiniLM: driving/car 0.72, employer/job 0.60,
cooking/kitchen 0.65, allergy/allergic 0.82). So the store keeps a vocabulary: every content
word its memories use, each with the embedder's vector (`RelatedWords`, persisted beside the
database as `<db>.words-<model>-<dim>`, extended as memories are written, at most
`MAX_WORDS`). A question's content words are embedded and each is joined by the store's words
nearest it above `RELATED_BAR` — words that occur in memories, so every one can match.

Used only when the message asks something (`asks_something`): "make me a sandwich" asks for
no memory, and a sandwich's near words (bread, lunch) must not bring back the bread maker.
Only a word the store barely uses and that is no everyday word is given stand-ins
(`RelatedWords.wants_stand_ins`): what the store says in the question's own words the search
finds already, and "big", "run" or "online" relate to too much to stand for anything. Each word standing
in is searched on its own (BM25, its best two memories), the closest words first, and what
they find joins automatic recall's candidates as relevant (`daemon.memory.auto_recall`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import numpy as np

from daemon.durable import write_atomic
from daemon.log import get_logger
from daemon.memory.text import content_words
from daemon.store.db import Database
from daemon.store.memories import MemoriesRepo
from daemon.text import stem
from daemon.tokens import default_counter

log = get_logger(__name__)

# Word cosine at which a word of the store stands in for a word of a question, per embedder.
# MiniLM: driving/car 0.72, cooking/kitchen 0.65, employer/job 0.60, run/marathon 0.53,
# visitors/guest 0.51; unrelated everyday pairs (employer/meetings, online/podcast) sit
# near 0.3. An embedder without a measured bar relates no words.
RELATED_BAR: dict[str, float] = {"all-MiniLM-L6-v2": 0.5}
# A question's word is given stand-ins only when the store barely uses it (in at most
# `RARE_IN_STORE` memories: otherwise the search finds it as it is) and it is no everyday
# word (cl100k id of " word" at least `EVERYDAY_RANK`, or several tokens: "use" 1005, "run"
# 1629, "big" 2466, "online" 2930 stay as they are; "driving" 10043, "visitors" 15613,
# "cooking" 17677, "employer" 19683, "allergy" 60754 are looked for in other words).
RARE_IN_STORE = 2
EVERYDAY_RANK = 8000
PER_WORD = 2  # the store's words kept per word of the question
MOST = 4  # and for the whole question
_NEAREST = 12  # the store's nearest words weighed for each word of the question
MAX_WORDS = 40_000  # vocabulary cap (float16, 384 dims: 31 MB at most)
_BATCH = 256
_BLOCK = 4096
_COUNT_CAP = 1000
_READ = 2000  # memories read per step when the vocabulary catches up
_WORD = re.compile(r"[a-z][a-z'-]*[a-z]")
_QUESTION_START = re.compile(
    r"^(?:\W*)(?:who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|"
    r"have|has|had|can|could|will|would|should|remind|any idea)\b"
)


def asks_something(prompt: str) -> bool:
    """Whether `prompt` asks something (a question mark, or a question's first word): "what
    are we driving these days?" does, "make me a sandwich" does not."""
    low = " ".join(prompt.lower().replace("’", "'").split())
    asked = "?" in low or bool(_QUESTION_START.match(low))
    return asked


def vocabulary_words(text: str) -> list[str]:
    """The words of `text` the vocabulary keeps: content words of letters, 3 to 24 long."""
    return [w for w in content_words(text) if 3 <= len(w) <= 24 and _WORD.fullmatch(w)]


def words_path(db_file: Path, model: str, dim: int) -> Path:
    """Where the vocabulary for `model` is kept: beside the database, one file per model."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"
    return db_file.with_name(f"{db_file.name}.words-{slug}-{dim}")


@dataclass(frozen=True)
class Related:
    """A word of the question and a word of the store that stands in for it."""

    asked: str
    word: str
    similarity: float
    # The similarity weighed by how few memories use the word (`specificity`): what the
    # stand-in's finds rank by, and the order stand-ins are taken in.
    weight: float = 0.0


class RelatedWords:
    """The store's vocabulary with one vector per word, and the words near a question's."""

    def __init__(self, db: Database, embedder: object) -> None:
        self.db = db
        self.store = MemoriesRepo(db)
        self.embedder = embedder
        self.name = str(getattr(embedder, "name", ""))
        self.dim = int(getattr(embedder, "dim", 0) or 0)
        self.bar = RELATED_BAR.get(self.name)
        self.words: list[str] = []
        self.counts: list[int] = []  # memories using each word (capped)
        self.index: dict[str, int] = {}
        self.vectors = np.zeros((0, self.dim), dtype=np.float16)
        self.last_rowid = 0
        self.path = words_path(Path(str(db.path)), self.name, self.dim)
        self._loaded = False
        self._asked: dict[str, np.ndarray] = {}
        self._lock = anyio.Lock()

    @property
    def usable(self) -> bool:
        return self.bar is not None and self.dim > 0

    def _load(self) -> None:
        self._loaded = True
        if not self.path.exists():
            return
        try:
            with np.load(self.path, allow_pickle=False) as data:
                words = [str(w) for w in data["words"]]
                vectors = np.asarray(data["vectors"], dtype=np.float16)
                last = int(data["last_rowid"])
                counts = [int(c) for c in data["counts"]]
        except (OSError, ValueError, KeyError) as exc:
            log.warning("vocabulary unreadable; rebuilt", path=str(self.path), error=str(exc))
            return
        if vectors.shape != (len(words), self.dim) or len(counts) != len(words):
            log.warning("vocabulary does not fit the embedder; rebuilt", path=str(self.path))
            return
        self.words, self.vectors, self.last_rowid, self.counts = words, vectors, last, counts
        self.index = {w: i for i, w in enumerate(words)}

    def _save(self) -> None:
        import io

        buf = io.BytesIO()
        np.savez(
            buf,
            words=np.array(self.words, dtype=str),
            vectors=self.vectors,
            counts=np.array(self.counts, dtype=np.int32),
            last_rowid=np.array(self.last_rowid),
        )
        try:
            write_atomic(self.path, buf.getvalue())
        except OSError as exc:  # a full disk costs the cache, not the turn
            log.warning("vocabulary not saved", path=str(self.path), error=str(exc))

    @property
    def busy(self) -> bool:
        """Whether a refresh is running (the first build of an old home, at the index's start)."""
        return self._lock.locked()

    async def refresh(self, *, rows: int | None = None) -> int:
        """Take in the words of memories written since the last call (at most `rows` of them
        when given); return how many words were new. A batch of memories is taken in whole
        or not at all (cancelled while its words are embedded, it is read again next time);
        the file is read and written off the event loop."""
        if not self.usable:
            return 0
        async with self._lock:
            if not self._loaded:
                await anyio.to_thread.run_sync(self._load)
            added = 0
            read = 0
            moved = False
            try:
                while len(self.words) < MAX_WORDS and (rows is None or read < rows):
                    step = _READ if rows is None else min(_READ, rows - read)
                    batch = await self.store.texts_after(self.last_rowid, step)
                    read += len(batch)
                    if not batch:
                        break
                    fresh: dict[str, int] = {}
                    known: list[int] = []
                    for row in batch:
                        for w in set(vocabulary_words(row.text)):
                            at = self.index.get(w)
                            if at is None:
                                fresh[w] = fresh.get(w, 0) + 1
                            else:
                                known.append(at)
                    kept = list(fresh)[: MAX_WORDS - len(self.words)]
                    vectors = await self._embed(kept)
                    # No await from here to the batch's end: its words, counts and position
                    # change together.
                    self.vectors = np.concatenate([self.vectors, vectors])
                    for w in kept:
                        self.index[w] = len(self.words)
                        self.words.append(w)
                        self.counts.append(min(fresh[w], _COUNT_CAP))
                    for at in known:
                        self.counts[at] = min(self.counts[at] + 1, _COUNT_CAP)
                    self.last_rowid = batch[-1].rowid
                    added += len(kept)
                    moved = True
            finally:
                if moved:
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(self._save)
            return added

    async def _embed(self, words: Sequence[str]) -> np.ndarray:
        """Unit vectors (float16) for `words`, embedded `_BATCH` at a time."""
        parts = [np.zeros((0, self.dim), dtype=np.float16)]
        for start in range(0, len(words), _BATCH):
            chunk = list(words[start : start + _BATCH])
            vectors = await self.embedder.embed(chunk)  # type: ignore[attr-defined]
            parts.append(_unit(vectors).astype(np.float16))
        return np.concatenate(parts)

    def wants_stand_ins(self, word: str) -> bool:
        """Whether the question's `word` is looked for in other words: rare in the store and
        no everyday word."""
        at = self.index.get(word)
        if at is not None and self.counts[at] > RARE_IN_STORE:
            return False
        rank = default_counter().word_rank(word)
        return rank is None or rank >= EVERYDAY_RANK

    async def near(self, question: str) -> list[Related]:
        """The store's words standing in for the content words of `question` (not the words
        themselves, which the search already looks for), best first."""
        if not self.usable or not len(self.words):
            return []
        await default_counter().loaded()  # `wants_stand_ins` ranks words by its vocabulary
        asked = [w for w in dict.fromkeys(vocabulary_words(question)) if self.wants_stand_ins(w)]
        if not asked:
            return []
        missing = [w for w in asked if w not in self._asked]
        if missing:
            for w, v in zip(missing, _unit(await self.embedder.embed(missing)), strict=True):  # type: ignore[attr-defined]
                self._asked[w] = v.astype(np.float32)
            if len(self._asked) > 4096:
                self._asked = dict(list(self._asked.items())[-2048:])
        assert self.bar is not None
        queries = np.stack([self._asked[w] for w in asked]).T
        # In blocks, so a large vocabulary is never held as float32 whole.
        sims = np.concatenate(
            [
                self.vectors[i : i + _BLOCK].astype(np.float32) @ queries
                for i in range(0, len(self.words), _BLOCK)
            ]
        )
        out: list[Related] = []
        taken = set(asked)
        stems = {stem(w) for w in asked}
        for col, word in enumerate(asked):
            near: list[Related] = []
            column = sims[:, col]
            top = np.argpartition(-column, _NEAREST)[:_NEAREST] if len(column) > _NEAREST else None
            nearest = top[np.argsort(-column[top])] if top is not None else np.argsort(-column)
            for row in nearest:
                sim = float(sims[row, col])
                if sim < self.bar:
                    break
                other = self.words[row]
                # Another form of the same word is the search's own business (its stems).
                if other in taken or stem(other) in stems:
                    continue
                weight = sim * self.specificity(self.counts[row])
                near.append(Related(word, other, round(sim, 3), round(weight, 3)))
            # A word half the store uses finds no one memory: "people" for "visitors" brings
            # back any day that mentioned people, "guest" the one line about the guest wifi.
            for r in sorted(near, key=lambda r: -r.weight)[:PER_WORD]:
                taken.add(r.word)
                out.append(r)
        return sorted(out, key=lambda r: -r.weight)[:MOST]

    def specificity(self, uses: int) -> float:
        """From 1 for a word one memory uses down to 0.5 for one every memory uses, by its
        inverse document frequency (log N/uses over log N); N is the last memory row read,
        which stands for how many memories were read (retired ones keep their rows)."""
        memories = max(self.last_rowid, uses, 2)
        return 0.5 + 0.5 * math.log(memories / max(uses, 1)) / math.log(memories)


def _unit(vectors: Iterable[np.ndarray] | np.ndarray) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr.reshape(1, -1)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return arr / norms
