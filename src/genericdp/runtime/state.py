"""One resource's device state: its units, replica IDs and health.

ListAndWatch must send the full list when it changes and only then, so every
change that alters the list bumps ``version`` and wakes the waiters; a change
that leaves the list as it was (a rescan finding the same units, a health
report repeating itself) does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from genericdp.discovery.model import DeviceInfo, Unit, replica_ids, unit_id_of


@dataclass(frozen=True)
class Lookup:
    """Device IDs of a request resolved against the current state."""

    units: tuple[Unit, ...]  # the distinct units behind the known IDs, sorted by ID
    unknown: tuple[str, ...]
    unhealthy: tuple[str, ...]  # device IDs the health monitor reports Unhealthy
    cleaning: tuple[str, ...] = ()  # unit IDs whose cleanup is due or running


class DeviceState:
    """Units, the replica count, the unhealthy and cleaning sets, with a change version.

    A unit is advertised Healthy unless the health monitor says otherwise or
    its cleanup is due or running (the kubelet must not pick it meanwhile).
    With a health probe (``expect_probes``), a unit is Unhealthy until the
    monitor has probed it (``genericdp.health`` says why).
    """

    def __init__(self, *, count: int = 1, units: Iterable[Unit] = ()) -> None:
        self._count = count
        self._units: dict[str, Unit] = {u.id: u for u in units}
        self._unhealthy: frozenset[str] = frozenset()
        self._probed: frozenset[str] | None = None  # None: no probe, nothing to wait for
        self._cleaning: frozenset[str] = frozenset()
        self._devices: tuple[DeviceInfo, ...] = self._build()
        self._version = 0
        self._closed = False
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        return self._version

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def units(self) -> dict[str, Unit]:
        return dict(self._units)

    @property
    def unhealthy(self) -> frozenset[str]:
        """Units advertised Unhealthy by health: failed, or not probed yet."""
        if self._probed is None:
            return self._unhealthy
        return self._unhealthy | (self._units.keys() - self._probed)

    @property
    def cleaning(self) -> frozenset[str]:
        return self._cleaning

    def devices(self) -> tuple[DeviceInfo, ...]:
        return self._devices

    def set_units(self, units: Iterable[Unit]) -> bool:
        """Replace the units; True when the device list changed."""
        self._units = {u.id: u for u in sorted(units, key=lambda u: u.id)}
        return self._refresh()

    def set_count(self, count: int) -> bool:
        self._count = count
        return self._refresh()

    def set_unhealthy(
        self, unit_ids: Iterable[str], *, probed: Iterable[str] | None = None
    ) -> bool:
        """Mark exactly these units Unhealthy (others Healthy); True when that changed.

        With ``expect_probes`` on, ``probed`` (the units probed so far) is
        required: the others stay Unhealthy.
        """
        self._unhealthy = frozenset(unit_ids)
        if self._probed is not None:
            if probed is None:
                raise ValueError("set_unhealthy needs probed= while probes are expected")
            self._probed = frozenset(probed)
        return self._refresh()

    def expect_probes(self, on: bool) -> bool:
        """A health probe starts (every unit Unhealthy until probed) or goes away."""
        self._unhealthy = frozenset()
        self._probed = frozenset() if on else None
        return self._refresh()

    def set_cleaning(self, unit_id: str, *, cleaning: bool) -> bool:
        """Put a unit in (or take it out of) cleanup; True when the device list changed."""
        self._cleaning = (self._cleaning | {unit_id}) if cleaning else (self._cleaning - {unit_id})
        return self._refresh()

    def lookup(self, device_ids: Iterable[str]) -> Lookup:
        known = {d.id: d for d in self._devices}
        unhealthy = self.unhealthy
        ids = list(dict.fromkeys(device_ids))
        unit_ids = sorted({unit_id_of(d) for d in ids if d in known})
        return Lookup(
            units=tuple(self._units[u] for u in unit_ids),
            unknown=tuple(d for d in ids if d not in known),
            unhealthy=tuple(d for d in ids if d in known and unit_id_of(d) in unhealthy),
            cleaning=tuple(u for u in unit_ids if u in self._cleaning),
        )

    async def wait_changed(self, version: int) -> int | None:
        """Wait until the version differs from ``version``; None once closed."""
        while not self._closed and self._version == version:
            await self._changed.wait()
        return None if self._closed else self._version

    def close(self) -> None:
        """End every waiter (streams end on shutdown)."""
        self._closed = True
        self._wake()

    def _build(self) -> tuple[DeviceInfo, ...]:
        unhealthy = self.unhealthy
        return tuple(
            DeviceInfo(
                id=rid,
                healthy=u.id not in unhealthy and u.id not in self._cleaning,
                numa_node=u.numa_node,
            )
            for u in sorted(self._units.values(), key=lambda u: u.id)
            for rid in replica_ids(u.id, self._count)
        )

    def _refresh(self) -> bool:
        devices = self._build()
        if devices == self._devices:
            return False
        self._devices = devices
        self._version += 1
        self._wake()
        return True

    def _wake(self) -> None:
        # A fresh event per change: waiters hold the old one, which stays set.
        old, self._changed = self._changed, asyncio.Event()
        old.set()
