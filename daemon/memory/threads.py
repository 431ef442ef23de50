"""How many threads an embedder may use: one policy for torch's encoder and numpy's BLAS."""

from __future__ import annotations

import os


def default_threads() -> int:
    """Return how many threads torch may use for embedding: half the usable cores, at least one.

    A 6-layer model on one short query gains nothing from intra-op parallelism, and on a
    small shared machine torch's spinning worker threads fight numpy, SQLite and each other:
    on 2 busy cores a one-line query took ~500 ms with 2 threads and ~25 ms with 1.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores // 2))
