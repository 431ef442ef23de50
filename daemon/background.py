"""Background work a system owns: one task group, entered with the system, cancelled on leaving.

A system that starts tasks of its own (a notice's desktop notification, a checklist's fork, a
schedule's timer) derives from `BackgroundWork` and starts them in `self._tg`; the daemon's
exit stack enters it, and leaving cancels whatever is still running there.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Self

import anyio
from anyio.abc import TaskGroup


class BackgroundWork:
    _tg: TaskGroup | None = None
    _stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._stack is not None and self._tg is not None, "not entered"
        self._tg.cancel_scope.cancel()
        stack, self._stack, self._tg = self._stack, None, None
        await stack.__aexit__(None, None, None)
