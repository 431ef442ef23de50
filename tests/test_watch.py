"""Live reload through real watchfiles: matrix, topic and persona edits apply on the next turn."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest
import structlog

from daemon.bus import EventBus
from daemon.clock import FakeClock
from daemon.context.assembler import ContextAssembler
from daemon.events import ConfigReloaded
from daemon.paths import Home
from daemon.settings import Settings
from daemon.tokens import TokenCounter
from daemon.topics.router import TopicRouter
from daemon.topics.watch import FileWatcher


@pytest.fixture(autouse=True)
def _default_logging() -> None:
    """Log to the current stdout: a CLI test elsewhere may have left logging on a closed capture."""
    structlog.reset_defaults()


pytestmark = pytest.mark.anyio


def matrix(*topics: tuple[str, list[str]]) -> str:
    entries = [
        {"id": tid, "file": f"topics/{tid}.md", "triggers": triggers} for tid, triggers in topics
    ]
    return "---\n" + json.dumps({"topics": entries}) + "\n---\n"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    home.ensure()
    home.matrix_file.write_text(matrix(("baking", ["bread"])))
    (home.topics_dir / "baking.md").write_text("# Baking\n\nWeigh the flour.\n")
    (home.topics_dir / "gardening.md").write_text("# Gardening\n\nWater at dawn.\n")
    return home


class Reloads:
    """Collect `ConfigReloaded` events and let a test wait for the next one."""

    def __init__(self, bus: EventBus) -> None:
        self.seen: list[tuple[str, ...]] = []
        self._event = anyio.Event()
        bus.on(ConfigReloaded, self._on)

    def _on(self, event: ConfigReloaded) -> None:
        self.seen.append(event.paths)
        self._event.set()

    async def next(self) -> tuple[str, ...]:
        with anyio.fail_after(10):
            await self._event.wait()
        self._event = anyio.Event()
        return self.seen[-1]


def parts(home: Home) -> tuple[Settings, TopicRouter, ContextAssembler, EventBus, FileWatcher]:
    settings = Settings()
    router = TopicRouter(home, settings.topics)
    assembler = ContextAssembler(
        home=home,
        settings=settings,
        view=None,
        router=router,
        counter=TokenCounter(),
        clock=FakeClock(),
    )
    bus = EventBus()
    watcher = FileWatcher(
        home,
        settings.topics,
        router=router,
        files=assembler.files,
        bus=bus,
        debounce_ms=50,
        step_ms=10,
        idle_wakeup_ms=200,
    )
    return settings, router, assembler, bus, watcher


async def test_matrix_and_topic_edits_apply_on_the_next_turn(home: Home) -> None:
    _, router, assembler, bus, watcher = parts(home)
    reloads = Reloads(bus)
    assert router.select("system_prompt", "tomatoes in the garden") == []
    async with bus, anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(watcher.run)
        home.matrix_file.write_text(
            matrix(("baking", ["bread"]), ("gardening", ["garden", "tomato"]))
        )
        paths = await reloads.next()
        assert str(home.matrix_file.resolve()) in paths
        assert [s.id for s in router.select("system_prompt", "tomatoes in the garden")] == [
            "gardening"
        ]

        (home.topics_dir / "gardening.md").write_text("# Gardening\n\nMulch in spring.\n")
        await reloads.next()
        with anyio.fail_after(10):
            turn = await assembler.assemble("tomatoes in the garden")
        assert "Mulch in spring." in turn.text and "Water at dawn." not in turn.text
        tg.cancel_scope.cancel()


async def test_broken_matrix_keeps_last_good_and_says_why(home: Home) -> None:
    _, router, _, bus, watcher = parts(home)
    reloads = Reloads(bus)
    router.reload()
    async with bus, anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(watcher.run)
        home.matrix_file.write_text('---\n{"topics": [\n---\n')
        await reloads.next()
        assert any(
            "not valid JSON" in p and "keeping the last good matrix" in p
            for p in watcher.last_problems
        )
        assert [s.id for s in router.select("system_prompt", "fresh bread")] == ["baking"]
        # Fixing the file brings the new version in.
        home.matrix_file.write_text(matrix(("gardening", ["garden"])))
        await reloads.next()
        assert router.select("system_prompt", "fresh bread") == []
        assert [s.id for s in router.select("system_prompt", "my garden")] == ["gardening"]
        tg.cancel_scope.cancel()


async def test_broken_persona_edit_keeps_last_good_and_is_reported(home: Home) -> None:
    _, _, assembler, bus, watcher = parts(home)
    reloads = Reloads(bus)
    soul = home.persona_dir / "SOUL.md"
    soul.write_text("# Soul\n\nI am steady.\n")
    with anyio.fail_after(10):
        await assembler.assemble("hi")
    async with bus, anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(watcher.run)
        soul.write_bytes(b"# Soul\n\n\xff\xfe half-saved")
        await reloads.next()
        assert watcher.last_problems == [
            "SOUL.md is not valid UTF-8 (byte 8); keeping the last good version"
        ]
        with anyio.fail_after(10):
            turn = await assembler.assemble("hi")
        assert "I am steady." in turn.text
        soul.write_text("# Soul\n\nI am renewed.\n")
        await reloads.next()
        assert watcher.last_problems == []
        with anyio.fail_after(10):
            turn = await assembler.assemble("hi")
        assert "I am renewed." in turn.text and "I am steady." not in turn.text
        tg.cancel_scope.cancel()


async def test_unrelated_files_are_ignored_and_cancel_is_prompt(home: Home) -> None:
    _, _, _, bus, watcher = parts(home)
    reloads = Reloads(bus)
    async with bus, anyio.create_task_group() as tg:
        with anyio.fail_after(10):
            await tg.start(watcher.run)
        (home.root / "reverie.db-wal").write_bytes(b"x")
        (home.topics_dir / "notes.txt").write_text("not a topic")
        home.wake_file.write_text("# Wake-up notes\n\nSlept well.\n")
        paths = await reloads.next()
        assert paths == (str(home.wake_file.resolve()),)
        started = time.monotonic()
        tg.cancel_scope.cancel()
    assert time.monotonic() - started < 2.0
    assert watcher.reloads == 1


def test_classify(home: Home) -> None:
    watcher = FileWatcher(home, Settings().topics)
    root = home.root.resolve()
    assert watcher.classify(root / "PERSONALITY_MATRIX.md") == "matrix"
    assert watcher.classify(root / "topics" / "x.md") == "topic"
    assert watcher.classify(root / "persona" / "SOUL.md") == "persona"
    assert watcher.classify(root / "persona" / "random.md") is None
    assert watcher.classify(root / "FACTS.md") == "wake"
    assert watcher.classify(root / "reverie.db") is None
