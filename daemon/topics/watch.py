"""Live reload: watch persona, topic, matrix, wake and pinned-fact files with watchfiles.

The watcher is a service: `await tg.start(watcher.run)` returns once the OS watch is in
place. Each batch of changes (debounced) is classified: a matrix or topic change reloads the
router, a persona/wake/facts change re-reads those files into the assembler's cache. A broken
edit keeps the last good version (the router and `FileCache` own that rule); the watcher logs
what happened and publishes `ConfigReloaded` so others (the journal, `reverie status`) can see.

Cancellation stops the watch promptly: a sibling task sets watchfiles' stop event when the
scope is cancelled, so the blocking OS watch returns within one poll step.
"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import anyio
from anyio.abc import TaskStatus
from watchfiles import Change, awatch

from daemon.bus import EventBus
from daemon.events import ConfigReloaded
from daemon.log import get_logger
from daemon.paths import PERSONA_FILES, Home
from daemon.settings import TopicsSettings
from daemon.topics.files import FileCache
from daemon.topics.router import TopicRouter, matrix_path

log = get_logger("topics.watch")


class FileWatcher:
    """Watch the files that shape the context and reload what changed, live."""

    def __init__(
        self,
        home: Home,
        settings: TopicsSettings,
        *,
        router: TopicRouter | None = None,
        files: FileCache | None = None,
        bus: EventBus | None = None,
        debounce_ms: int = 300,
        step_ms: int = 50,
        idle_wakeup_ms: int = 500,
        force_polling: bool | None = None,
    ) -> None:
        self.home = home
        self.settings = settings
        self.router = router
        self.files = files
        self.bus = bus
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self.idle_wakeup_ms = idle_wakeup_ms
        self.last_problems: list[str] = []
        self.force_polling = force_polling
        self.matrix = matrix_path(home, settings).resolve()
        self.persona_dir = home.persona_dir.resolve()
        self.topics_dir = home.topics_dir.resolve()
        self.reloads = 0

    # -- what we watch ---------------------------------------------------------------------

    def watched_dirs(self) -> list[Path]:
        """The directories to watch (non-recursively): home root, persona, topics, the matrix's."""
        dirs = [self.home.root.resolve(), self.persona_dir, self.topics_dir, self.matrix.parent]
        out: list[Path] = []
        for d in dirs:
            if d not in out:
                out.append(d)
        return out

    def classify(self, path: Path) -> str | None:
        """Say what a changed path is: "matrix", "topic", "persona", "wake" — or None to ignore."""
        path = path.resolve() if not path.is_absolute() else path
        if path == self.matrix:
            return "matrix"
        if path.suffix != ".md":
            return None
        if path.parent == self.topics_dir:
            return "topic"
        if path.parent == self.persona_dir and path.name in PERSONA_FILES:
            return "persona"
        if path in (self.home.wake_file.resolve(), self.home.facts_file.resolve()):
            return "wake"
        return None

    def _filter(self, change: Change, raw: str) -> bool:
        return self.classify(Path(raw)) is not None

    # -- the service -----------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Watch until cancelled; signal readiness once the OS watch is in place.

        Readiness is signalled at the first idle wake-up of the OS watch (`idle_wakeup_ms`),
        which proves the watch is registered. Cancellation returns within about one
        `step_ms`; a failing reload is logged and the watch goes on.
        """
        for d in self.watched_dirs():
            d.mkdir(parents=True, exist_ok=True)
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._stop_on_cancel, stop, name="topic-watcher-stop")
            changes = aclosing(
                awatch(
                    *self.watched_dirs(),
                    watch_filter=self._filter,
                    debounce=self.debounce_ms,
                    step=self.step_ms,
                    stop_event=stop,
                    recursive=False,
                    force_polling=self.force_polling,
                    yield_on_timeout=True,
                    rust_timeout=self.idle_wakeup_ms,
                )
            )
            started = False
            try:
                async with changes as batches:
                    async for batch in batches:
                        if not started:
                            # The first yield (even an idle one) means the OS watch is registered.
                            started = True
                            task_status.started()
                        if batch:
                            await self.handle(frozenset(Path(p) for _, p in batch))
            finally:
                stop.set()
                tg.cancel_scope.cancel()

    @staticmethod
    async def _stop_on_cancel(stop: anyio.Event) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            stop.set()

    async def handle(self, paths: frozenset[Path]) -> list[str]:
        """Reload whatever `paths` touch; return the problems found (already logged)."""
        kinds: dict[str, list[Path]] = {}
        for path in sorted(paths):
            kind = self.classify(path)
            if kind is not None:
                kinds.setdefault(kind, []).append(path)
        if not kinds:
            return []
        problems: list[str] = []
        if self.router is not None and ({"matrix", "topic"} & kinds.keys()):
            problems.extend(self.router.reload())
        if self.files is not None:
            touched = [*kinds.get("persona", []), *kinds.get("wake", [])]
            if touched:
                problems.extend(self.files.refresh(touched))
        self.reloads += 1
        self.last_problems = problems
        names = tuple(str(p) for p in sorted(p for ps in kinds.values() for p in ps))
        log.info("context files reloaded", paths=names, kinds=sorted(kinds), problems=len(problems))
        for problem in problems:
            log.warning("reload kept the last good version", problem=problem)
        if self.bus is not None:
            await self.bus.publish(ConfigReloaded(paths=names))
        return problems
