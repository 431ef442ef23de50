"""The search matrix's file beside the database: a JSON header, then the arrays, 64-byte aligned.

One file per embedding model (`matrix_path`). The header records the model, dimension, row
count and the database's index identity, epoch and generation; `read_matrix` checks each
against the index and memory-maps the arrays copy-on-write, or raises `StaleMatrix` saying why
the file does not describe the index (another database, a reindex since, a generation the
database never reached, a row count that disagrees, a torn file) — the matrix is then rebuilt
from the database (`daemon.memory.matrix`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from daemon.errors import ReverieError
from daemon.store.memories import IndexState

MAGIC = b"RVMATRIX"
FORMAT = 1
ALIGN = 64
# content_hash is 16 bytes of blake2b in hex.
HASH_DTYPE = "S32"
# The matrix's arrays, in the order the file holds them.
ARRAYS = (
    "_rowids",
    "_kind",
    "_retired",
    "_ts",
    "_explicit",
    "_importance",
    "_has_vec",
    "_hash",
    "_vecs",
)


class StaleMatrix(ReverieError):
    """A persisted matrix does not describe this index; the message says why."""


def matrix_path(db_file: Path, model: str, dim: int) -> Path:
    """Where the matrix for `model` is persisted: beside the database, one file per model."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"
    return db_file.with_name(f"{db_file.name}.matrix-{slug}-{dim}")


class MatrixSnapshot:
    """A copy of a matrix's arrays and header, to be written to a file."""

    def __init__(self, *, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.header = header
        self.arrays = arrays

    def write(self, path: Path) -> None:
        """Write atomically: a temporary file beside `path`, fsynced, renamed over it (blocking)."""
        layout: dict[str, Any] = {}
        offset = 0
        for name, arr in self.arrays.items():
            layout[name] = {"offset": offset, "dtype": arr.dtype.str, "shape": list(arr.shape)}
            offset += -(-arr.nbytes // ALIGN) * ALIGN
        header = json.dumps({**self.header, "arrays": layout}).encode()
        start = -(-(len(MAGIC) + 8 + len(header)) // ALIGN) * ALIGN
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(MAGIC + len(header).to_bytes(8, "little") + header)
                for name, arr in self.arrays.items():
                    fh.seek(start + layout[name]["offset"])
                    fh.write(np.ascontiguousarray(arr).tobytes())
                fh.truncate(start + offset)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _read_header(path: Path) -> tuple[dict[str, Any], int, int]:
    """(header, its size, the file's size)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(MAGIC) + 8)
            if len(head) < len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
                raise StaleMatrix("not a matrix file")
            size = int.from_bytes(head[len(MAGIC) :], "little")
            if size > 1 << 20:
                raise StaleMatrix("header too large")
            header = json.loads(fh.read(size))
            total = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        raise StaleMatrix("no persisted matrix") from None
    except (OSError, ValueError) as exc:
        raise StaleMatrix(f"unreadable ({exc})") from None
    return header, size, total


def _check(header: dict[str, Any], model: str, dim: int, state: IndexState) -> int:
    """The file's generation, once its header is found to describe the index `state`."""
    if header.get("format") != FORMAT:
        raise StaleMatrix(f"format {header.get('format')} (this build reads {FORMAT})")
    if header.get("model") != model or header.get("dim") != dim:
        raise StaleMatrix(f"made by {header.get('model')}/{header.get('dim')}, not {model}/{dim}")
    if not state.index_id or header.get("index_id") != state.index_id:
        raise StaleMatrix("made for another database")
    if header.get("epoch") != state.epoch:
        raise StaleMatrix(
            f"epoch {header.get('epoch')}, the index is at epoch {state.epoch} (reindexed since)"
        )
    gen = int(header.get("generation", -1))
    if gen < 0 or gen > state.generation:
        raise StaleMatrix(f"generation {gen} is ahead of the index's {state.generation}")
    return gen


def read_matrix(
    path: Path, *, model: str, dim: int, state: IndexState
) -> tuple[int, int, dict[str, np.ndarray]]:
    """(generation, rows, arrays by name) of the matrix at `path`, memory-mapped copy-on-write,
    if it describes the index `state` for `model`/`dim`; else `StaleMatrix` saying why."""
    header, size, total = _read_header(path)
    gen = _check(header, model, dim, state)
    start = -(-(len(MAGIC) + 8 + size) // ALIGN) * ALIGN
    loaded: dict[str, np.ndarray] = {}
    try:
        n = int(header["rows"])
        for name in ARRAYS:
            spec = header["arrays"][name]
            shape = tuple(int(x) for x in spec["shape"])
            dtype = np.dtype(spec["dtype"])
            if shape[0] != n or (name == "_vecs" and shape != (n, dim)):
                raise StaleMatrix(f"array {name} has shape {shape} for {n} rows")
            nbytes = int(np.prod(shape)) * dtype.itemsize
            if start + int(spec["offset"]) + nbytes > total:
                raise StaleMatrix("truncated")
            if nbytes == 0:
                loaded[name] = np.zeros(shape, dtype=dtype)
            else:
                loaded[name] = np.memmap(
                    path, dtype=dtype, mode="c", offset=start + int(spec["offset"]), shape=shape
                )
    except (KeyError, TypeError, ValueError) as exc:
        raise StaleMatrix(f"bad layout ({exc})") from None
    if n > 1 and not bool(np.all(loaded["_rowids"][1:] > loaded["_rowids"][:-1])):
        raise StaleMatrix("rows out of order")
    return gen, n, loaded
