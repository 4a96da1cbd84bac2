"""Cleanup: one resource's ``cleanup`` hook, run when a unit is released.

Whoever learns that nobody holds a unit any more (the PodResources poller, or
an Allocate of a unit still held, ``UsageTracker.claim``) hands a ``Release``
to the resource's ``Cleaner``. The hook is the one the unit was handed out
under (``runtime/owed.py``), else the definition's now.
"""

from __future__ import annotations

import asyncio
import logging

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet, wait_event
from genericdp.discovery.model import Unit
from genericdp.errors import HookError, clip
from genericdp.hooks import CLEANUP, HookRun
from genericdp.runtime.backend import ResourceParts
from genericdp.runtime.owed import Release

log = logging.getLogger(__name__)


class Cleaner:
    """Runs one resource's cleanup hook, each unit in its own task.

    A unit is in the state's cleaning set (Unhealthy, refused by Allocate) from
    the moment its cleanup is due until it passes, retried with backoff while the
    unit exists: it stays out of service rather than go to the next pod dirty.
    Cleanup of a unit gone runs once.
    """

    def __init__(self, parts: ResourceParts) -> None:
        self._state, self._definition, context = parts.state, parts.definition, parts.context
        self._run_hook = context.run_hook
        self._node_name = context.settings.node_name
        self._backoff = context.cleanup_backoff or (lambda: Backoff(initial=1.0, maximum=60.0))
        self._tasks = TaskSet(log)
        self._running: dict[str, asyncio.Task[None]] = {}  # for stop to wait on
        self._stopping = asyncio.Event()
        self._owed = context.owed

    @property
    def resource(self) -> str:
        return self._definition().name

    def wanted(self, unit_id: str) -> bool:
        """Whether the unit has a cleanup hook to run (owed, or its definition's)."""
        owed = self._owed.get(self.resource, unit_id) is not None
        return owed or self._definition().hooks.cleanup is not None

    def busy(self, unit_id: str) -> bool:
        """Whether a cleanup of the unit is due or running."""
        return unit_id in self._state.cleaning

    def released(self, release: Release) -> None:
        """Start cleaning a released unit (retried until it succeeds)."""
        unit = self._state.units.get(release.unit_id)
        if not self.wanted(release.unit_id) or self._stopping.is_set():
            return
        if self.busy(release.unit_id):
            return  # a cleanup already running covers this release too
        gone = unit is None  # unplugged while held: cleaned once, as it was, not retried
        if unit is None:
            handed = self._owed.get(self.resource, release.unit_id)
            if handed is None:
                log.debug("%s: released unit %s is gone", self.resource, clip(release.unit_id))
                return
            unit = handed.unit
        self._state.set_cleaning(unit.id, cleaning=True)
        self._spawn(unit, release.device_ids, retry=not gone, wait_first=False)

    async def clean_now(self, release: Release) -> bool:
        """Clean a unit before an Allocate goes on (the kubelet already reuses it); on
        failure it is retried in the background. False when there was nothing to run:
        then it returned at once, and nothing can have changed meanwhile."""
        unit = self._state.units.get(release.unit_id)
        if unit is None or not self.wanted(unit.id) or self.busy(unit.id):
            return False
        self._state.set_cleaning(unit.id, cleaning=True)
        passed = False
        try:
            passed = await self._attempt(unit, release.device_ids, retry=True)
        finally:  # also when the Allocate is cancelled: the hook was stopped midway
            if passed or self._stopping.is_set():
                self._state.set_cleaning(unit.id, cleaning=False)
            else:
                self._spawn(unit, release.device_ids, retry=True, wait_first=True)
        return True

    async def stop(self) -> tuple[str, ...]:
        """No more retries; running hooks get 5 s to finish, then are cancelled."""
        self._stopping.set()
        running = [t for t in self._running.values() if not t.done()]
        self._running.clear()
        if running:
            await asyncio.wait(running, timeout=5.0)
        # A cancelled hook gets SIGTERM, then SIGKILL 2 s later (hooks/execution.py).
        return await self._tasks.stop(timeout=3.0)

    def _spawn(
        self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool, wait_first: bool
    ) -> None:
        async def clean() -> None:
            try:
                await self._clean(unit, device_ids, retry=retry, wait_first=wait_first)
            finally:
                self._state.set_cleaning(unit.id, cleaning=False)

        self._running = {u: t for u, t in self._running.items() if not t.done()}
        self._running[unit.id] = self._tasks.spawn(
            f"{self.resource}/cleanup/{unit.id}",
            clean,
            log_fields={"resource": self.resource, "unit": unit.id},
            finishable=True,
        )

    async def _clean(
        self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool, wait_first: bool
    ) -> None:
        backoff = self._backoff()
        if wait_first and not await self._pause(unit, backoff):
            return
        while not await self._attempt(unit, device_ids, retry=retry):
            if not retry or not await self._pause(unit, backoff):
                return

    async def _attempt(self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool) -> bool:
        name = self.resource
        with logsetup.fields(resource=name, unit=unit.id):
            owed = self._owed.get(name, unit.id)
            spec = owed.hook if owed is not None else self._definition().hooks.cleanup
            if spec is None:
                return True  # handed out without a hook, which a reload removed: nothing to run
            run = HookRun(
                CLEANUP, spec, name, (unit,), device_ids, node_name=self._node_name, logger=log
            )
            try:
                await self._run_hook(run)
            except HookError as exc:
                what = (
                    "out of service until its cleanup passes" if retry else "removed, not retried"
                )
                log.error("%s: unit %s %s: %s", name, unit.id, what, exc)
                if not retry:  # a gone unit's one cleanup, passed or not
                    await self._owed.done(name, unit.id)
                return False
            await self._owed.done(name, unit.id)
            return True

    async def _pause(self, unit: Unit, backoff: Backoff) -> bool:
        """Wait before the next attempt; False when it should not happen."""
        delay = backoff.next()
        log.info("%s: cleanup of unit %s again in %.1fs", self.resource, unit.id, delay)
        if await wait_event(self._stopping, delay):
            return False
        if unit.id not in self._state.units:
            log.warning("%s: unit %s is gone; its cleanup is not retried", self.resource, unit.id)
            return False
        return True
