"""The seams live in `daemon.seams`; the modules that defined them re-export the same classes.

Two checks against the real implementations: `isinstance`/`issubclass` (runtime: the members
are there) and mypy on this file (`_assignable` below: the signatures match), which
`test_the_real_implementations_match_the_seams_signatures` runs (marked slow: `pytest -m slow
tests/test_seams.py`, or `.venv/bin/mypy tests/test_seams.py`).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from daemon import seams
from daemon.agent.gateway import ChatGateway
from daemon.channels.matrix import MatrixChannel
from daemon.chat.testing import ScriptedChatHandler
from daemon.clock import FakeClock, SystemClock
from daemon.context.testing import ListMemoryView
from daemon.memory.auto_recall import IndexMemoryView
from daemon.memory.embedders import (
    ApiEmbedder,
    HashEmbedder,
    LocalEmbedder,
    MiniLMEmbedder,
    NoEmbedder,
)
from daemon.models.anthropic import AnthropicModel
from daemon.models.offline import OfflineModel
from daemon.models.openai_compat import OpenAICompatModel
from daemon.schedule.courier import NoticeCourier
from daemon.testing import ScriptedModel
from daemon.tools.approvals import PermissionGuard
from daemon.tools.mcp import McpServers

REPO = Path(__file__).resolve().parent.parent

# (module, name) that defined each seam before `daemon.seams`, and must still name it.
OLD_HOMES = [
    ("daemon.clock", "Clock"),
    ("daemon.models.base", "Model"),
    ("daemon.memory.embedders", "Embedder"),
    ("daemon.memory.api", "MemoryView"),
    ("daemon.chat.server", "ChatHandler"),
    ("daemon.agent.gateway", "NoticeDesk"),
    ("daemon.schedule.courier", "NoticeChannel"),
    ("daemon.tools.registry", "ToolGuard"),
    ("daemon.tools.registry", "ToolSource"),
]


@pytest.mark.parametrize(("module", "name"), OLD_HOMES)
def test_the_old_name_is_the_seam(module: str, name: str) -> None:
    import importlib

    assert getattr(importlib.import_module(module), name) is getattr(seams, name)


def test_every_protocol_of_the_seams_module_is_listed_and_runtime_checkable() -> None:
    protocols = {
        n
        for n, v in vars(seams).items()
        if isinstance(v, type)
        and getattr(v, "_is_protocol", False)
        and v.__module__ == seams.__name__
    }
    assert protocols == {name for _, name in OLD_HOMES}
    for name in protocols:
        assert getattr(seams, name)._is_runtime_protocol, name


# Protocols of methods only: the classes themselves are checked.
METHOD_SEAMS: list[tuple[type, type]] = [
    (seams.Clock, SystemClock),
    (seams.Clock, FakeClock),
    (seams.MemoryView, IndexMemoryView),
    (seams.MemoryView, ListMemoryView),
    (seams.ChatHandler, ChatGateway),
    (seams.ChatHandler, ScriptedChatHandler),
    (seams.NoticeDesk, NoticeCourier),
    (seams.ToolGuard, PermissionGuard),
    (seams.ToolSource, McpServers),
]
# MatrixChannel (the one NoticeChannel) needs a homeserver's settings to be made: mypy only.


@pytest.mark.parametrize(("seam", "impl"), METHOD_SEAMS, ids=lambda t: t.__name__)
def test_the_implementation_class_has_the_seams_methods(seam: type, impl: type) -> None:
    assert issubclass(impl, seam)


def test_instances_with_data_members_are_the_seams() -> None:
    # Protocols with attributes (`provider`, `name`, `dim`) check instances only.
    for model in (OfflineModel(), ScriptedModel(script=[])):
        assert isinstance(model, seams.Model)
    for embedder in (NoEmbedder(), HashEmbedder(dim=16)):
        assert isinstance(embedder, seams.Embedder)


def test_a_missing_member_is_seen() -> None:
    class HalfClock:
        def now(self) -> datetime:
            return datetime.now(UTC)

    class NamelessEmbedder:
        dim = 3

        async def embed(self, texts: Any) -> Any:
            return None

    assert not issubclass(HalfClock, seams.Clock)
    assert not isinstance(NamelessEmbedder(), seams.Embedder)


def _assignable(
    system: SystemClock,
    fake: FakeClock,
    anthropic: AnthropicModel,
    openai: OpenAICompatModel,
    offline: OfflineModel,
    scripted: ScriptedModel,
    no: NoEmbedder,
    hashed: HashEmbedder,
    minilm: MiniLMEmbedder,
    local: LocalEmbedder,
    api: ApiEmbedder,
    index_view: IndexMemoryView,
    list_view: ListMemoryView,
    gateway: ChatGateway,
    scripted_chat: ScriptedChatHandler,
    courier: NoticeCourier,
    matrix: MatrixChannel,
    guard: PermissionGuard,
    mcp: McpServers,
) -> None:
    """Never called: mypy checks that each real implementation is its seam, signatures and all."""
    clocks: list[seams.Clock] = [system, fake]
    models: list[seams.Model] = [anthropic, openai, offline, scripted]
    embedders: list[seams.Embedder] = [no, hashed, minilm, local, api]
    views: list[seams.MemoryView] = [index_view, list_view]
    handlers: list[seams.ChatHandler] = [gateway, scripted_chat]
    desk: seams.NoticeDesk = courier
    channel: seams.NoticeChannel = matrix
    tool_guard: seams.ToolGuard = guard
    source: seams.ToolSource = mcp
    del clocks, models, embedders, views, handlers, desk, channel, tool_guard, source


# mypy over the daemon's modules: about 4 s with a warm cache, 70 s cold (2 cores).
@pytest.mark.slow
def test_the_real_implementations_match_the_seams_signatures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "tests/test_seams.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
