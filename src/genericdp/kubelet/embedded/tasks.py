"""Named background tasks that are tracked, guarded and cancelled together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Tasks:
    """The embedded kubelet's background work: stream readers and grace timers."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``coro`` under ``name``; a failure is logged, never lost."""
        # The coroutine is the task itself (no wrapper), so a task cancelled before
        # its first step still closes it instead of leaving it "never awaited".
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    async def cancel_all(self) -> None:
        """Cancel every task and wait for all of them to finish."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        # Failures were already logged by _finished; here we only wait.
        await asyncio.gather(*tasks, return_exceptions=True)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("embedded kubelet task %s failed", task.get_name(), exc_info=error)
