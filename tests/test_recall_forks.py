"""Recall prefers the trunk's sessions: a fork's summary is findable but ranks after them."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from daemon.models.base import ModelRequest, ModelUnavailable
from daemon.testing import ScriptedModel
from tests.memory_support import add_session, memory_system, raising

pytestmark = pytest.mark.anyio

KILN = [
    ("user", "What is the kiln firing schedule?"),
    ("assistant", "The kiln firing schedule: cone 6, loaded at dawn."),
]


def _summary(title: str, slug: str, summary: str) -> str:
    return json.dumps(
        {"title": title, "slug": slug, "tags": [], "summary": summary, "decisions": []}
    )


async def test_recall_ranks_trunk_summaries_before_fork_summaries(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def planner(request: ModelRequest) -> str:
        seen.append(request.messages[-1].text.split("\nINDEX:\n", 1)[1].splitlines())
        return json.dumps({"ids": []})  # nothing picked: the hybrid-search fallback decides

    models = {
        "recall_planner": ScriptedModel(planner),
        "recall_synthesis": raising(ModelUnavailable("down")),
    }
    async with memory_system(tmp_path, models=models) as memory:
        memory.roles._overrides["summariser"] = ScriptedModel(
            [
                _summary("Kiln", "kiln-talk", "We talked about the kiln: cone 6, loaded at dawn."),
                # The fork's summary matches the query better and is more recent: alone, it would rank first.
                _summary(
                    "Kiln firing schedule",
                    "kiln-firing-schedule-work",
                    "Kiln firing schedule checked: the firing schedule is cone 6.",
                ),
            ]
        )
        await add_session(memory.db, "trunk-kiln", KILN, started="2026-03-01T09:00:00+00:00")
        await add_session(
            memory.db, "fork-kiln", KILN, started="2026-03-02T18:00:00+00:00", kind="fork"
        )
        for sid in ("trunk-kiln", "fork-kiln"):
            await memory.summarise_session(sid, wait=True)
        await memory.index.flush()
        with anyio.fail_after(10):
            result = await memory.recall_result("kiln firing schedule")
    lines = seen[0]
    trunk_at = next(i for i, line in enumerate(lines) if line.startswith("summary:trunk-kiln"))
    fork_at = next(i for i, line in enumerate(lines) if line.startswith("summary:fork-kiln"))
    assert trunk_at < fork_at
    cites = [s.cite for s in result.sources if s.kind == "summary"]
    assert len(cites) == 2 and "kiln-firing-schedule-work" in cites[1] and "kiln-talk" in cites[0]
