"""Named, guarded long-lived tasks (in the manner of kopf).

Every coroutine that outlives a call runs here under a name. A failure is
logged with that name and, for tasks spawned with a ``Backoff``, the coroutine
is started again after a growing delay; it never takes its neighbours down.
Shutdown is cancellation plus a bounded wait that names the stragglers.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from genericdp import logsetup
from genericdp.errors import GenericdpError

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


@dataclass
class Backoff:
    """Exponential backoff with jitter: ``initial`` doubling up to ``maximum``.

    ``jitter`` is a fraction: each delay is scaled by a random factor in
    ``[1 - jitter, 1 + jitter]`` so many resources do not retry in lockstep.
    """

    initial: float = 0.1
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, repr=False)
    _current: float = field(default=0.0, init=False, repr=False)

    def next(self) -> float:
        """The delay before the next attempt (and grow the one after)."""
        base = self.initial if self._current == 0.0 else self._current
        self._current = min(base * self.factor, self.maximum)
        spread = 1.0 + self.jitter * (2.0 * self.rng.random() - 1.0)
        return min(base, self.maximum) * spread

    def reset(self) -> None:
        self._current = 0.0


class TaskSet:
    """A set of named tasks that are all cancelled and awaited together."""

    def __init__(self, logger: logging.Logger = log, *, sleep: Sleep = asyncio.sleep) -> None:
        self._log = logger
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(n for n, t in self._tasks.items() if not t.done()))

    def spawn(
        self,
        name: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        *,
        backoff: Backoff | None = None,
        log_fields: Mapping[str, str] | None = None,
    ) -> asyncio.Task[None]:
        """Run ``factory()`` as task ``name``; with ``backoff``, restart it after failures.
        Its log lines (JSON) carry ``log_fields`` (``resource``, ``unit``)."""
        old = self._tasks.get(name)
        if old is not None and not old.done():
            raise RuntimeError(f"task {name} is already running")
        context = logsetup.context_with(**log_fields) if log_fields else None
        task = asyncio.create_task(self._guard(name, factory, backoff), name=name, context=context)
        self._tasks[name] = task
        task.add_done_callback(self._forget)
        return task

    async def cancel(self, name: str, *, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Cancel one task and wait for it (up to ``timeout`` seconds)."""
        task = self._tasks.get(name)
        if task is not None:
            await self._cancel_all([task], timeout)

    async def stop(self, *, timeout: float = 5.0) -> tuple[str, ...]:  # noqa: ASYNC109
        """Cancel every task, wait up to ``timeout``; return the names still running."""
        return await self._cancel_all(list(self._tasks.values()), timeout)

    async def _cancel_all(
        self,
        tasks: list[asyncio.Task[None]],
        timeout: float,  # noqa: ASYNC109
    ) -> tuple[str, ...]:
        for task in tasks:
            task.cancel()
        if not tasks:
            return ()
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        stragglers = tuple(sorted(t.get_name() for t in pending))
        if stragglers:
            self._log.error("tasks did not stop within %gs: %s", timeout, ", ".join(stragglers))
        return stragglers

    def _forget(self, task: asyncio.Task[None]) -> None:
        if self._tasks.get(task.get_name()) is task:
            del self._tasks[task.get_name()]

    async def _guard(
        self,
        name: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        backoff: Backoff | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await factory()
            except asyncio.CancelledError:
                raise
            except GenericdpError as exc:
                # Ours carry what a user needs; a traceback would only bury it.
                self._log.error("task %s failed: %s", name, exc)
            except Exception:
                self._log.exception("task %s failed", name)
            else:
                return
            if backoff is None:
                return
            if backoff.maximum < loop.time() - started:
                backoff.reset()  # it ran fine for a while: this is a fresh failure
            delay = backoff.next()
            self._log.info("task %s restarts in %.2fs", name, delay)
            await self._sleep(delay)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:  # noqa: ASYNC109
    """Wait up to ``timeout`` seconds for ``event``; whether it is set.

    ``asyncio.timeout`` rather than ``asyncio.wait_for``: on Python 3.11
    ``wait_for`` can swallow a cancellation that arrives as the event fires,
    which would leave a long-lived loop running after its task was cancelled.
    """
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
