"""One resource's CDI spec kept in step with its units (``allocate.cdi``).

Each scan writes the spec before the new units reach the device list, so the
kubelet never allocates a unit whose CDI name the runtime cannot resolve yet.
A spec that cannot be written is retried by the next scan and by Allocate,
which until then refuses the units it lacks, with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from genericdp.allocation.cdi import SpecPublisher, qualified_name
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import CdiSpecError

log = logging.getLogger(__name__)


class CdiSync:
    """The spec file of one resource: written by scans, checked by Allocate, retracted."""

    def __init__(self, cdi_dir: Path) -> None:
        self._cdi = SpecPublisher(cdi_dir)
        self._lock = asyncio.Lock()  # one write at a time: scans and Allocate retries
        self._error: str | None = None

    async def sync(self, definition: ResourceDefinition, units: Sequence[Unit]) -> None:
        """Bring the spec in line with ``units`` (or remove it: ``cdi`` off); never raises."""
        if not definition.allocate.cdi:
            await self.retract(definition.name)
            return
        name = definition.name
        async with self._lock:
            try:
                changed = await asyncio.to_thread(self._cdi.publish, definition, units)
            except CdiSpecError as exc:
                self._failed(name, str(exc))
                return
        if changed:
            log.info("%s: CDI spec in %s describes %d unit(s)", name, self._cdi.cdi_dir, len(units))
        if self._error is not None:
            log.info("%s: CDI spec written again", name)
            self._error = None

    async def retract(self, name: str) -> None:
        """Remove the spec (the resource left, or turned ``cdi`` off); never raises."""
        if not self._cdi.touched:
            return  # the usual case: this resource never had cdi on
        async with self._lock:
            try:
                removed = await asyncio.to_thread(self._cdi.retract, name)
            except CdiSpecError as exc:
                log.warning("%s: %s", name, exc)
                return
        self._error = None
        if removed is not None:
            log.info("%s: removed CDI spec %s", name, removed)

    async def check(
        self,
        definition: ResourceDefinition,
        units: Sequence[Unit],
        current: Callable[[], Sequence[Unit]],
    ) -> None:
        """Refuse ``units`` when their CDI names would not resolve, after one more
        write attempt of the spec for every ``current`` unit."""
        if not self._cdi.unpublished(definition, units):
            return
        # A scan's write failed (or the units changed a moment ago): try again now.
        await self.sync(definition, current())
        missing = self._cdi.unpublished(definition, units)
        if missing:
            names = ", ".join(qualified_name(definition.name, u) for u in missing)
            reason = self._error or "the spec does not describe them yet"
            raise CdiSpecError(f"the runtime could not resolve CDI device(s) {names}: {reason}")

    def _failed(self, name: str, message: str) -> None:
        if message != self._error:
            log.error(
                "%s: %s; Allocate of units missing from it fails until it can be written",
                name,
                message,
            )
        self._error = message
