"""The Allocate side of one resource, whatever asks: check, render, claim, init hooks.

Free of any kubelet protocol: the device-plugin edge (``runtime/plugin.py``)
calls it from Allocate, GetPreferredAllocation and PreStartContainer, and a
second backend can call it the same way. It talks to the resource's own
pieces directly (device state, CDI spec, usage and cleanup), never back up to
the runner.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from genericdp import logsetup
from genericdp.allocation.render import INLINE_RENDER_SECONDS, Allocation, render_allocation
from genericdp.config.model import Exec, ResourceDefinition
from genericdp.config.templates import SliceSpent
from genericdp.discovery.model import Unit
from genericdp.errors import InvalidDevicesError, clip, first_of
from genericdp.hooks import INIT, PRE_START, HookRun
from genericdp.runtime.cdisync import CdiSync
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.preferred import preferred_allocation
from genericdp.runtime.recorder import allocation_result
from genericdp.runtime.release import Cleaner, UsageTracker
from genericdp.runtime.state import DeviceState

log = logging.getLogger(__name__)

_MAX_IDS_SHOWN = 5
_MAX_ID_CHARS = 80  # our IDs are at most 63

# Checks the rendered answers before anything has a side effect (the
# device-plugin edge refuses an answer over the kubelet's message limit).
AnswerCheck = Callable[[Sequence[tuple[str, ...]], Sequence[Allocation]], None]


def _no_check(_requests: Sequence[tuple[str, ...]], _answers: Sequence[Allocation]) -> None:
    return None


def _shown(ids: Sequence[str]) -> str:
    """A few IDs for a message; each is cut short (the peer chose them, maybe 1 MB long)."""
    return first_of(ids, _MAX_IDS_SHOWN, show=lambda i: clip(i, _MAX_ID_CHARS))


class Allocator:
    """Allocate, preferred allocation and PreStart of one resource's devices.

    Release tracking (``runtime/release.py``): the kubelet handing IDs out
    again means their last holder is done (``usage.claim``, whose releases
    the cleaner cleans first); what we hand out is in use (``handed_out``).
    """

    def __init__(
        self,
        definition: Callable[[], ResourceDefinition],
        state: DeviceState,
        context: ResourceContext,
        *,
        usage: UsageTracker,
        cleaner: Cleaner,
        cdi: CdiSync,
    ) -> None:
        self._definition = definition
        self._state = state
        self._context = context
        self._usage = usage
        self._cleaner = cleaner
        self._cdi = cdi

    def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        return preferred_allocation(
            self._definition().preferred_allocation,
            available=available,
            must_include=must_include,
            size=size,
            units=self._state.units_view(),
        )

    async def allocate(
        self, requests: Sequence[tuple[str, ...]], *, check: AnswerCheck = _no_check
    ) -> list[Allocation]:
        """Check every container's IDs first, then run init hooks and render."""
        started = time.monotonic()
        error: BaseException | None = None
        try:
            with logsetup.fields(resource=self._definition().name):
                return await self._allocate(requests, check)
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.monotonic() - started
            name = self._definition().name
            self._context.recorder.allocation(name, allocation_result(error), elapsed)

    async def _allocate(
        self, requests: Sequence[tuple[str, ...]], check: AnswerCheck
    ) -> list[Allocation]:
        # Everything that can refuse the request without side effects comes
        # first: a refused Allocate (unknown IDs, a path escaping its template,
        # an answer over 4 MiB) must not run cleanup on a unit a live pod holds,
        # nor make us forget that pod's hold (release.UsageTracker.claim).
        definition = self._definition()
        node_name = self._context.node_name
        lookups = [self.checked(ids) for ids in requests]

        def render(slice_seconds: float | None) -> list[Allocation]:
            return [
                render_allocation(
                    definition,
                    units,
                    node_name=node_name,
                    device_ids=ids,
                    slice_seconds=slice_seconds,
                )
                for ids, units in zip(requests, lookups, strict=True)
            ]

        # On the loop for a short slice: most templates take far less, and the
        # hop to a worker thread and back was most of an Allocate's time. Past
        # the slice, off the loop: a template may work up to its time budget
        # (render.py), and registration, health and every other resource must
        # not wait.
        waited = False  # whether anything could change the units from here on
        try:
            allocations = render(INLINE_RENDER_SECONDS)
        except SliceSpent:
            waited = True
            allocations = await asyncio.to_thread(render, None)
        check(requests, allocations)
        # The CDI check may refuse the Allocate: before any claim, which cleans.
        if definition.allocate.cdi:
            waited = True
            for ids in requests:
                await self._cdi.check(definition, self._state, ids)
        for ids in requests:
            for release in self._usage.claim(definition.name, ids):
                # a cleanup the kubelet did not wait for (none: nothing waited)
                waited = await self._cleaner.clean_now(release) or waited
        if waited:  # a unit may have gone unhealthy, or its cleanup failed, meanwhile
            lookups = [self.checked(ids) for ids in requests]
        if (init := definition.hooks.init) is not None:
            for ids, units in zip(requests, lookups, strict=True):
                await self._hook(INIT, init, definition.name, units, ids)
        for ids in requests:
            self._usage.handed_out(definition.name, ids)
        return allocations

    async def pre_start(self, device_ids: tuple[str, ...]) -> None:
        definition = self._definition()
        with logsetup.fields(resource=definition.name):
            await self._pre_start(definition, device_ids)

    async def _pre_start(self, definition: ResourceDefinition, device_ids: tuple[str, ...]) -> None:
        units = self.checked(device_ids, require_healthy=False)
        if (spec := definition.hooks.pre_start) is not None:
            await self._hook(PRE_START, spec, definition.name, units, device_ids)

    async def _hook(
        self, name: str, spec: Exec, resource: str, units: Sequence[Unit], ids: Sequence[str]
    ) -> None:
        node_name = self._context.node_name
        run = HookRun(name, spec, resource, units, ids, node_name=node_name, logger=log)
        await self._context.run_hook(run)

    def checked(self, ids: Sequence[str], *, require_healthy: bool = True) -> tuple[Unit, ...]:
        """The units of ``ids``; InvalidDevicesError naming unknown, cleaning or unhealthy IDs."""
        found = self._state.lookup(ids)
        if found.unknown:
            raise InvalidDevicesError(f"unknown device IDs: {_shown(found.unknown)}")
        if require_healthy and found.cleaning:
            unit = "unit" if len(found.cleaning) == 1 else "units"
            verb = "is" if len(found.cleaning) == 1 else "are"
            raise InvalidDevicesError(f"{unit} {_shown(found.cleaning)} {verb} being cleaned up")
        if require_healthy and found.unhealthy:
            fault = f" ({self._state.fault})" if self._state.fault else ""
            raise InvalidDevicesError(f"unhealthy device IDs: {_shown(found.unhealthy)}{fault}")
        return found.units
