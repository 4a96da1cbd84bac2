"""One resource's device state: its units, what is held, health and cleanup.

A backend must tell the kubelet the device list when it changes and only
then, so every change that alters the list bumps ``version`` and wakes the
waiters; a change that leaves the list as it was (a rescan finding the same
units, a health report repeating itself) does not. How a unit's devices are
named is the backend's (``DeviceIds``): one device per unit by default, the
device plugin's replicas ``<unit>::<i>`` (``deviceplugin/replicas.py``).

What containers hold (``set_in_use``) shapes the list: a unit that vanishes
while held stays listed, Unhealthy, until its last holder is gone, and a
naming that follows use (``count: unbounded``) changes with it. Why:
docs/contributing/architecture.md, "What is held shapes the list".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from genericdp.discovery.model import Unit

# A listed unit as a naming sees it: the unit, its held IDs, whether it is present.
ListedUnit = tuple[Unit, frozenset[str], bool]


class DeviceIds(Protocol):
    """How a backend names the devices of a unit (``DeviceState`` asks it)."""

    def unit_of(self, device_id: str) -> str: ...
    def valid(self, device_id: str) -> bool: ...  # well formed for this naming (unit aside)

    @property
    def follows_use(self) -> bool: ...  # whether the IDs listed depend on which are held

    def shape(self, listed: Iterable[ListedUnit]) -> object:
        """What the listed units' IDs are made of: equal shapes, equal lists.

        ``listed`` is lazy: a naming that does not follow use ignores it."""


@dataclass(frozen=True)
class OnePerUnit:
    """Each unit is one device, named by the unit's ID (the DRA backend's naming)."""

    def unit_of(self, device_id: str) -> str:
        return device_id

    def valid(self, device_id: str) -> bool:  # noqa: ARG002 -- the DeviceIds protocol's signature
        return True

    @property
    def follows_use(self) -> bool:
        return False

    def shape(self, listed: Iterable[ListedUnit]) -> object:  # noqa: ARG002 -- the DeviceIds protocol's signature
        return None


ONE_PER_UNIT = OnePerUnit()


@dataclass(frozen=True)
class Lookup:
    """Device IDs of a request resolved against the current state."""

    units: tuple[Unit, ...]  # the distinct units behind the known IDs, sorted by ID
    unknown: tuple[str, ...]
    unhealthy: tuple[str, ...]  # device IDs the health monitor reports Unhealthy
    cleaning: tuple[str, ...] = ()  # unit IDs whose cleanup is due or running


class DeviceState:
    """Units, their naming, the unhealthy and cleaning sets, with a change version.

    A unit is Healthy unless its probe failed or has not run yet
    (``expect_probes``), its cleanup is due or running, or a scan found a
    required ``allocate.devices`` node missing (``fault``: the kubelet keeps it
    in capacity, out of allocatable).
    """

    def __init__(self, ids: DeviceIds = ONE_PER_UNIT, *, units: Iterable[Unit] = ()) -> None:
        self._ids = ids
        self._units: dict[str, Unit] = {u.id: u for u in sorted(units, key=lambda u: u.id)}
        self._held: dict[str, frozenset[str]] = {}  # unit ID -> its device IDs in use
        self._gone: dict[str, Unit] = {}  # vanished while held: listed Unhealthy
        self._unhealthy: frozenset[str] = frozenset()
        self._incomplete = frozenset(u.id for u in self._units.values() if u.missing)
        self._probed: frozenset[str] | None = None  # None: no probe, nothing to wait for
        self._cleaning: frozenset[str] = frozenset()
        # Whether the list changed is decided on a signature that costs units,
        # not units x replicas.
        self._signature = self._sign()
        self._version = 0
        self._messages: dict[str, str] = {}  # unit ID -> why its last probe failed
        self._closed = False
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        return self._version

    @property
    def probed(self) -> frozenset[str] | None:
        """The units probed so far; None when the resource has no probe."""
        return self._probed

    @property
    def probe_messages(self) -> Mapping[str, str]:
        """Why each unit's last probe failed (units whose last probe passed are absent)."""
        return MappingProxyType(self._messages)

    def note_probe(self, unit_id: str, failure: str | None) -> None:
        """A probe of ``unit_id`` ended: ``failure`` says how, None when it passed."""
        if self._messages.get(unit_id) == failure:
            return
        if failure is None:
            del self._messages[unit_id]
        else:
            self._messages[unit_id] = failure
        self._wake()

    @property
    def ids(self) -> DeviceIds:
        return self._ids

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def units(self) -> dict[str, Unit]:
        return dict(self._units)

    def units_view(self) -> Mapping[str, Unit]:
        """The units without a copy (read-only; for per-request lookups)."""
        return MappingProxyType(self._units)

    @property
    def unhealthy(self) -> frozenset[str]:
        """Units advertised Unhealthy: failed, not probed yet, or missing a required node."""
        unprobed = set() if self._probed is None else self._units.keys() - self._probed
        return self._unhealthy | self._incomplete | unprobed

    @property
    def fault(self) -> str | None:
        """Why every unit is Unhealthy whatever its probe says, or None."""
        missing = sorted({m for uid in self._incomplete for m in self._units[uid].missing})
        if not missing:
            return None
        return "required device node(s) missing: " + ", ".join(missing)

    @property
    def cleaning(self) -> frozenset[str]:
        return self._cleaning

    @property
    def gone(self) -> frozenset[str]:
        """Units that vanished while held: listed Unhealthy until released."""
        return frozenset(self._gone)

    @property
    def out(self) -> frozenset[str]:
        """Units listed Unhealthy: by health, during cleanup, or gone."""
        return self.unhealthy | self._cleaning | self._gone.keys()

    def listed_units(self) -> tuple[Unit, ...]:
        """The units listed, in ID order: the present ones and those gone while held."""
        if not self._gone:
            return tuple(self._units.values())
        return tuple(sorted((*self._units.values(), *self._gone.values()), key=lambda u: u.id))

    def held_ids(self, unit_id: str) -> frozenset[str]:
        """The IDs of ``unit_id`` that containers hold (``set_in_use``)."""
        return self._held.get(unit_id, frozenset())

    def present(self, unit_id: str) -> bool:
        """Whether the unit was found by the last scan (not only kept while held)."""
        return unit_id in self._units

    def set_units(self, units: Iterable[Unit]) -> bool:
        """Replace the units (one gone but held stays listed); True when the list changed."""
        found = {u.id: u for u in sorted(units, key=lambda u: u.id)}
        if found == self._units and all(
            uid not in found and uid in self._held for uid in self._gone
        ):
            # A rescan that found what was there: nothing changed, nobody is
            # woken (every rescan of every resource, once a minute and at each
            # device event anywhere under /dev).
            return False
        before = {**self._gone, **self._units}
        self._units = found
        self._gone = {
            uid: unit
            for uid, unit in sorted(before.items())
            if uid not in self._units and uid in self._held
        }
        self._incomplete = frozenset(u.id for u in self._units.values() if u.missing)
        self._messages = {k: v for k, v in self._messages.items() if k in self._units}
        return self._refresh()

    def set_ids(self, ids: DeviceIds) -> bool:
        """Name the units' devices anew (the definition's sharing changed)."""
        self._ids = ids
        return self._refresh()

    def set_in_use(self, device_ids: Iterable[str]) -> tuple[str, ...]:
        """What containers hold now; the vanished units this drops from the list. A held
        ID of a unit never seen (it vanished while the daemon was down) is listed as a
        unit without nodes, Unhealthy, so the kubelet keeps seeing what its checkpoint holds.
        """
        held: dict[str, set[str]] = {}
        for device_id in device_ids:
            held.setdefault(self._ids.unit_of(device_id), set()).add(device_id)
        now = {uid: frozenset(ids) for uid, ids in held.items()}
        unseen = now.keys() - self._units.keys() - self._gone.keys()
        if now == self._held and not unseen and self._gone.keys() <= now.keys():
            # Nothing changed: no refresh, so no waiter (every ListAndWatch
            # stream, the DRA edge) wakes at each PodResources poll.
            return ()
        self._held = now
        dropped = tuple(sorted(uid for uid in self._gone if uid not in self._held))
        for uid in dropped:
            del self._gone[uid]
        for uid in sorted(unseen):
            self._gone[uid] = Unit(id=uid, nodes=())
        self._refresh()
        return dropped

    def set_unhealthy(
        self, unit_ids: Iterable[str], *, probed: Iterable[str] | None = None
    ) -> bool:
        """Mark exactly these units Unhealthy; True when that changed. With
        ``expect_probes`` on, ``probed`` is required: the others stay Unhealthy."""
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

    def known(self, device_id: str) -> bool:
        """Whether ``device_id`` names a device of a current unit: parsed, not looked up
        in the device list (not the million IDs of ``count: 1000`` over 1000 units)."""
        unit_id = self._ids.unit_of(device_id)
        if unit_id not in self._units and unit_id not in self._gone:
            return False
        return self._ids.valid(device_id)

    def lookup(self, device_ids: Iterable[str]) -> Lookup:
        """Costs what the request names: only its units' health is looked at
        (one pass, in the request's order; every Allocate makes one or two)."""
        unknown: list[str] = []
        unhealthy: list[str] = []
        found: set[str] = set()
        for device_id in dict.fromkeys(device_ids):
            if not self.known(device_id):
                unknown.append(device_id)
                continue
            unit_id = self._ids.unit_of(device_id)
            found.add(unit_id)
            if self._out_of_health(unit_id):
                unhealthy.append(device_id)
        unit_ids = sorted(found)
        return Lookup(
            units=tuple([self._units.get(u) or self._gone[u] for u in unit_ids]),
            unknown=tuple(unknown),
            unhealthy=tuple(unhealthy),
            cleaning=tuple([u for u in unit_ids if u in self._cleaning]),
        )

    def _out_of_health(self, unit_id: str) -> bool:
        """``unit_id in self.unhealthy`` or gone, without building either set."""
        return (
            unit_id in self._unhealthy
            or unit_id in self._incomplete
            or unit_id in self._gone
            or (self._probed is not None and unit_id in self._units and unit_id not in self._probed)
        )

    def next_change(self) -> asyncio.Event:
        """An event set at the next change of any kind, the list's or not (a unit
        probed for the first time, a probe's failure message), and at ``close``:
        what a DRA edge follows. Taken before reading, so no change is missed."""
        return self._changed

    async def wait_changed(self, version: int) -> int | None:
        """Wait until the version differs from ``version``; None once closed."""
        while not self._closed and self._version == version:
            await self._changed.wait()
        return None if self._closed else self._version

    def close(self) -> None:
        """End every waiter (streams end on shutdown)."""
        self._closed = True
        self._wake()

    def _sign(self) -> tuple[object, ...]:
        """What the device list is made of: equal signatures, equal lists."""
        ids = self._units.keys()
        listed = ((u, self.held_ids(u.id), u.id in self._units) for u in self.listed_units())
        return (
            tuple((u.id, u.numa_node) for u in self._units.values()),
            tuple(self._gone),
            self._ids,
            self._ids.shape(listed),
            frozenset(self.unhealthy & ids),
            frozenset(self._cleaning & ids),
        )

    def _refresh(self) -> bool:
        signature = self._sign()
        if signature == self._signature:
            self._wake()  # waiters on the version look and wait again
            return False
        self._signature = signature
        self._version += 1
        self._wake()
        return True

    def _wake(self) -> None:
        # A fresh event per change: waiters hold the old one, which stays set.
        old, self._changed = self._changed, asyncio.Event()
        old.set()
