"""A small asyncio toolkit with no knowledge of devices or kubelets (after kopf's aiokits).

``TaskSet``: a task that fails is logged and, given a ``Backoff``, restarted; one that
returns is logged as ended unexpectedly (a loop that fell out silently is a resource
that stopped working) unless ``finishable``; shutdown names the stragglers.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from inotify_simple import INotify

from genericdp import logsetup
from genericdp.errors import GenericdpError

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
_T = TypeVar("_T")


@dataclass
class Backoff:
    """``initial`` doubling up to ``maximum``, each delay scaled by a random factor in
    ``[1 - jitter, 1 + jitter]`` so many resources do not retry in lockstep."""

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
        self._tasks: set[asyncio.Task[None]] = set()
        self._guarded: dict[str, asyncio.Task[None]] = {}  # spawned: one per name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(t.get_name() for t in self._tasks if not t.done()))

    def spawn(
        self,
        name: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        *,
        backoff: Backoff | None = None,
        log_fields: Mapping[str, str] | None = None,
        finishable: bool = False,
    ) -> asyncio.Task[None]:
        """Run ``factory()`` as task ``name``; with ``backoff``, restart it after failures.
        Its log lines (JSON) carry ``log_fields`` (``resource``, ``unit``)."""
        old = self._guarded.get(name)
        if old is not None and not old.done():
            raise RuntimeError(f"task {name} is already running")
        context = logsetup.context_with(**log_fields) if log_fields else None
        guard = self._guard(name, factory, backoff, finishable=finishable)
        task = asyncio.create_task(guard, name=name, context=context)
        self._guarded[name] = task
        self._track(task)
        return task

    def run(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` once as task ``name`` (names may repeat); a failure is logged. No
        wrapper: a task cancelled before its first step still closes ``coro``."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(self._report)
        self._track(task)
        return task

    async def cancel(self, name: str, *, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        tasks = [t for t in self._tasks if t.get_name() == name]
        await self._cancel_all(tasks, timeout)

    async def stop(self, *, timeout: float | None = 5.0) -> tuple[str, ...]:  # noqa: ASYNC109
        """Cancel every task, wait up to ``timeout`` (None: no limit); the names still running."""
        return await self._cancel_all(list(self._tasks), timeout)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._forget)

    async def _cancel_all(
        self,
        tasks: list[asyncio.Task[None]],
        timeout: float | None,  # noqa: ASYNC109
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
        self._tasks.discard(task)
        if self._guarded.get(task.get_name()) is task:
            del self._guarded[task.get_name()]

    def _report(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            self._log.error("task %s failed", task.get_name(), exc_info=error)

    async def _guard(
        self,
        name: str,
        factory: Callable[[], Coroutine[Any, Any, None]],
        backoff: Backoff | None,
        *,
        finishable: bool,
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
            except Exception:  # noqa: BLE001 -- the task guard: a bug in any task is logged with its traceback
                self._log.exception("task %s failed", name)
            else:
                if not finishable:
                    self._log.warning("task %s ended unexpectedly", name)
                return
            if backoff is None:
                return
            if backoff.maximum < loop.time() - started:
                backoff.reset()  # it ran fine for a while: this is a fresh failure
            delay = backoff.next()
            self._log.info("task %s restarts in %.2fs", name, delay)
            await self._sleep(delay)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:  # noqa: ASYNC109
    """Wait up to ``timeout`` seconds (None: no limit) for ``event``; whether it is set.
    Not ``wait_for``: on Python 3.11 it can swallow a cancellation that arrives as the
    event fires, leaving a long-lived loop running after its task was cancelled."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def wait_any(events: Sequence[asyncio.Event], timeout: float | None) -> None:  # noqa: ASYNC109
    """Until one of ``events`` is set, or ``timeout`` seconds pass (None: no limit)."""
    if any(e.is_set() for e in events):
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def next_by(items: AsyncIterator[_T], deadline: float) -> _T:
    """The next of ``items``, or TimeoutError once the loop's clock reaches ``deadline``
    (only the wait is bounded; ``timeout_at``, for ``wait_event``'s reason)."""
    async with asyncio.timeout_at(deadline):
        return await anext(items)


class Changes:
    """A signal that state changed: ``notify`` wakes every waiter and arms a fresh event,
    so a waiter, checking its own condition after each change, never misses one."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until ``condition()`` holds, checked at every change; False after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await wait_event(self._event, remaining)
        return True


class StopSignals:
    """SIGTERM and SIGINT as a request to stop (``wait``). ``remove`` first thing at
    shutdown: a second signal then has its default effect and ends a stuck shutdown."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._received: list[str] = []
        for sig in self.SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        self._received.append(sig.name)
        self._stop.set()

    async def wait(self) -> str:
        """The name of the first signal (``SIGTERM``), once it comes."""
        await self._stop.wait()
        return self._received[0]

    def remove(self) -> None:
        for sig in self.SIGNALS:
            self._loop.remove_signal_handler(sig)


@asynccontextmanager
async def inotify_events(
    on_error: Callable[[OSError], Exception],
) -> AsyncIterator[tuple[INotify, asyncio.Event]]:
    """A non-blocking INotify and an event set whenever it has something to read, closed
    on exit; ``on_error`` turns an OSError at start (too many instances) into ours."""
    try:
        inotify = INotify(nonblocking=True)
    except OSError as exc:
        raise on_error(exc) from exc
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(inotify.fileno(), readable.set)
    try:
        yield inotify, readable
    finally:
        loop.remove_reader(inotify.fileno())
        inotify.close()
