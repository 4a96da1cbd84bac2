"""The devices this node serves through DRA: every resource's units, by device name.

Prepare finds an allocated device by recomputing ``device_name(resource, unit.id)`` over the
current units; the health service streams what is here. One pool per node, named for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.service import DeviceHealth, Health

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Located:
    """An allocated device found on this node."""

    definition: ResourceDefinition
    unit: Unit
    healthy: bool

    @property
    def resource(self) -> str:
        return self.definition.name


@dataclass
class _Resource:
    definition: ResourceDefinition
    units: dict[str, Unit]
    probed: bool  # the definition has a health check
    unhealthy: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()  # units probed at least once
    messages: Mapping[str, str] | None = None
    updated: float = 0.0


class Inventory:
    """Every served resource's units and health, and a version that moves on each change."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self._resources: dict[str, _Resource] = {}
        self._names: dict[str, tuple[str, str]] = {}  # device name -> (resource, unit id)
        self.version = 0
        self._changed = asyncio.Event()

    def definition(self, resource: str) -> ResourceDefinition | None:
        held = self._resources.get(resource)
        return held.definition if held is not None else None

    def units(self, resource: str) -> tuple[Unit, ...]:
        held = self._resources.get(resource)
        return tuple(held.units.values()) if held is not None else ()

    def set_resource(self, definition: ResourceDefinition, units: Sequence[Unit]) -> None:
        """The resource's definition and current units (discovery, reload)."""
        found = {u.id: u for u in units}
        held = self._resources.get(definition.name)
        if held is None:
            held = self._resources[definition.name] = _Resource(definition, found, False)
        elif (held.definition, held.units) == (definition, found):
            return  # a rescan that found what was there
        held.definition, held.units = definition, found
        held.probed = definition.health is not None
        held.updated = time.time()
        self._reindex()

    def set_health(
        self,
        resource: str,
        unhealthy: AbstractSet[str],
        probed: AbstractSet[str],
        messages: Mapping[str, str],
    ) -> None:
        """The resource's health: unhealthy and probed unit IDs, and why each failed."""
        held = self._resources.get(resource)
        if held is None:
            return
        report = (frozenset(unhealthy), frozenset(probed), dict(messages))
        if (held.unhealthy, held.seen, held.messages) == report:
            return
        held.unhealthy, held.seen, held.messages = report
        held.updated = time.time()
        self._bump()

    def remove_resource(self, resource: str) -> None:
        if self._resources.pop(resource, None) is not None:
            self._reindex()

    def locate(self, name: str) -> Located | None:
        """The device named ``name`` in this node's pool, if it is here now."""
        found = self._names.get(name)
        if found is None:
            return None
        resource, unit_id = found
        held = self._resources[resource]
        return Located(held.definition, held.units[unit_id], _healthy(held, unit_id))

    def health(self) -> tuple[DeviceHealth, ...]:
        """Every device's health now, sorted by name."""
        out: list[DeviceHealth] = []
        for name, (resource, unit_id) in sorted(self._names.items()):
            held = self._resources[resource]
            messages = held.messages or {}
            if unit_id in held.unhealthy and (unit_id in messages or not held.probed):
                # Unplugged while held, or a required node missing: whatever a probe says.
                state, message = Health.UNHEALTHY, messages.get(unit_id) or "unhealthy"
            elif not held.probed:
                state, message = Health.HEALTHY, "no health check configured"
            elif unit_id not in held.seen:
                state, message = Health.UNKNOWN, "not probed yet"
            elif unit_id in held.unhealthy:
                state, message = Health.UNHEALTHY, messages.get(unit_id) or "health probe failed"
            else:
                state, message = Health.HEALTHY, ""
            out.append(DeviceHealth(name, state, message, held.updated))
        return tuple(out)

    async def wait_changed(self, version: int) -> int:
        """Wait until the version moves past ``version``; the new version."""
        while self.version == version:
            self._changed.clear()
            await self._changed.wait()
        return self.version

    def _reindex(self) -> None:
        names: dict[str, tuple[str, str]] = {}
        for resource, held in self._resources.items():
            for unit_id in held.units:
                name = device_name(resource, unit_id)
                other = names.setdefault(name, (resource, unit_id))
                if other != (resource, unit_id):
                    log.error(
                        "device name %s of %s unit %s is already %s unit %s: the second is not"
                        " served through DRA",
                        name,
                        resource,
                        unit_id,
                        *other,
                    )
        self._names = names
        self._bump()

    def _bump(self) -> None:
        self.version += 1
        self._changed.set()


def _healthy(held: _Resource, unit_id: str) -> bool:
    if unit_id in held.unhealthy:
        return False
    return not held.probed or unit_id in held.seen
