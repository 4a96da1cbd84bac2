"""The Allocate side of one resource: plan, encode, commit; preStart.

Free of any kubelet protocol: the edge (``plugin.py``) calls it with the
encoder of its answer (``kubelet/servicer.py``'s, which also refuses an answer
the kubelet cannot take).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from genericdp import logsetup
from genericdp.allocation.plan import Allocation, Plan, plan_allocation
from genericdp.allocation.render import rendered_soon
from genericdp.config.model import ResourceDefinition
from genericdp.deviceplugin.cleanup import Cleaner
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.discovery.model import Unit
from genericdp.errors import InvalidDevicesError, clip, first_of
from genericdp.hooks import INIT, PRE_START, HookRun
from genericdp.runtime.backend import ResourceParts
from genericdp.runtime.recorder import allocation_result

log = logging.getLogger(__name__)

_MAX_IDS_SHOWN = 5
_MAX_ID_CHARS = 80  # our IDs are at most 63

_Answer = TypeVar("_Answer")


def _shown(ids: Sequence[str]) -> str:
    """A few IDs for a message; each is cut short (the peer chose them, maybe 1 MB long)."""
    return first_of(ids, _MAX_IDS_SHOWN, show=lambda i: clip(i, _MAX_ID_CHARS))


class Allocator:
    """Allocate and PreStart of one resource's devices."""

    def __init__(self, parts: ResourceParts, *, usage: UsageTracker, cleaner: Cleaner) -> None:
        self._definition, self._state, self._context = parts.definition, parts.state, parts.context
        self._cdi = parts.cdi
        self._usage = usage
        self._cleaner = cleaner

    async def allocate(
        self, requests: Sequence[tuple[str, ...]], encode: Callable[[Sequence[Allocation]], _Answer]
    ) -> _Answer:
        """Plan every container's allocation, ``encode`` the answer, then commit: a
        refused Allocate (unknown IDs, a path escaping its template, an answer
        ``encode`` refuses) must not clean a unit a live pod holds, nor forget its hold."""
        started = time.monotonic()
        error: BaseException | None = None
        definition = self._definition()
        try:
            with logsetup.fields(resource=definition.name):
                plans, waited = await self._plan(definition, requests)
                answer = encode([plan.receives for plan in plans])
                await self._commit(definition, plans, waited=waited)
                return answer
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.monotonic() - started
            self._context.recorder.allocation(definition.name, allocation_result(error), elapsed)

    async def _plan(
        self, definition: ResourceDefinition, requests: Sequence[tuple[str, ...]]
    ) -> tuple[list[Plan], bool]:
        """One plan per container, its units looked up once; whether it was
        rendered off the loop (the units may have changed meanwhile)."""
        node_name = self._context.settings.node_name
        lookups = [self.checked(ids) for ids in requests]

        def plan(slice_seconds: float | None) -> list[Plan]:
            return [
                plan_allocation(
                    definition, units, ids, node_name=node_name, slice_seconds=slice_seconds
                )
                for ids, units in zip(requests, lookups, strict=True)
            ]

        return await rendered_soon(plan)

    async def _commit(
        self, definition: ResourceDefinition, plans: Sequence[Plan], *, waited: bool
    ) -> None:
        """Take the claims (cleanups the kubelet did not wait for first), run the init hooks."""
        # The CDI check may refuse the Allocate: before any claim, which cleans.
        if definition.allocate.cdi:
            waited = True
            for plan in plans:
                await self._cdi.check(definition, plan.units, self._current_units)
        for plan in plans:
            for release in self._usage.claim(definition.name, plan.device_ids):
                # a cleanup the kubelet did not wait for (none: nothing waited)
                waited = await self._cleaner.clean_now(release) or waited
        if waited:  # a unit may have gone unhealthy, or its cleanup failed, meanwhile
            for plan in plans:
                self.checked(plan.device_ids)
        for plan in plans:
            if (run := plan.hook(INIT, logger=log)) is not None:
                await self._context.run_hook(run)
        for plan in plans:
            await self._context.owed.handed_out(definition, plan.units)
            self._usage.handed_out(definition.name, plan.device_ids)

    def _current_units(self) -> tuple[Unit, ...]:
        return tuple(self._state.units_view().values())

    async def pre_start(self, device_ids: tuple[str, ...]) -> None:
        definition = self._definition()
        node_name = self._context.settings.node_name
        with logsetup.fields(resource=definition.name):
            units = self.checked(device_ids, require_healthy=False)
            run = HookRun.of(
                PRE_START, definition, units, device_ids, node_name=node_name, logger=log
            )
            if run is not None:
                await self._context.run_hook(run)

    def checked(self, ids: Sequence[str], *, require_healthy: bool = True) -> tuple[Unit, ...]:
        """The units of ``ids``; InvalidDevicesError naming unknown, cleaning or unhealthy IDs."""
        found = self._state.lookup(ids)
        if found.unknown:
            raise InvalidDevicesError(f"unknown device IDs: {_shown(found.unknown)}")
        if require_healthy and found.cleaning:
            out = self._context.owed.out_of_service(self._definition().name)
            if why := [f"{clip(u, _MAX_ID_CHARS)}: {out[u]}" for u in found.cleaning if u in out]:
                raise InvalidDevicesError(f"out of service: {why[0]}")
            unit = "unit" if len(found.cleaning) == 1 else "units"
            verb = "is" if len(found.cleaning) == 1 else "are"
            raise InvalidDevicesError(f"{unit} {_shown(found.cleaning)} {verb} being cleaned up")
        if require_healthy and found.unhealthy:
            fault = f" ({self._state.fault})" if self._state.fault else ""
            raise InvalidDevicesError(f"unhealthy device IDs: {_shown(found.unhealthy)}{fault}")
        return found.units
