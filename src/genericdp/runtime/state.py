"""One resource's device state: its units, replica IDs and health.

ListAndWatch must send the full list when it changes and only then, so every
change that alters the list bumps ``version`` and wakes the waiters; a change
that leaves the list as it was (a rescan finding the same units, a health
report repeating itself) does not.

What containers hold (``set_in_use``, from PodResources and our Allocate)
shapes the list in two ways:

- A unit whose nodes vanish while a container holds it stays listed,
  Unhealthy, until the last holder is gone, then leaves the list (the
  kubelet shows a listed device's health in the pod's
  ``allocatedResourcesStatus``; an ID that simply disappears reads Healthy
  there). A unit that comes back with the same ID is itself again.
- ``count: unbounded`` lists the held IDs of each unit plus a few free ones
  (``runtime/sharing.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import overload

from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.kubelet.devices import DeviceInfo, unit_id_of
from genericdp.replicaids import replica_id, split_replica_id
from genericdp.runtime.sharing import advertised_indices, replica_index


def free_ids_of(definition: ResourceDefinition) -> int | None:
    """``DeviceState``'s ``free_ids``: None for a bounded ``count``."""
    return definition.free_ids if definition.unbounded else None


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
    monitor has probed it (``genericdp.health`` says why). A unit whose scan
    found a required ``allocate.devices`` node missing (``Unit.missing``) is
    Unhealthy until a scan finds it: the kubelet keeps it in capacity, out of
    allocatable, and the reason is ``fault``.
    """

    def __init__(
        self, *, count: int = 1, units: Iterable[Unit] = (), free_ids: int | None = None
    ) -> None:
        self._count = count
        self._free = free_ids  # None: bounded (``count`` IDs per unit); else unbounded
        self._units: dict[str, Unit] = {u.id: u for u in sorted(units, key=lambda u: u.id)}
        self._held: dict[str, frozenset[str]] = {}  # unit ID -> its device IDs in use
        self._gone: dict[str, Unit] = {}  # vanished while held: listed Unhealthy
        self._unhealthy: frozenset[str] = frozenset()
        self._incomplete = frozenset(u.id for u in self._units.values() if u.missing)
        self._probed: frozenset[str] | None = None  # None: no probe, nothing to wait for
        self._cleaning: frozenset[str] = frozenset()
        # The list is built only when asked for (ListAndWatch); whether it
        # changed is decided on a signature that costs units, not units x count.
        self._signature = self._sign()
        self._devices: tuple[DeviceInfo, ...] | None = None
        self._version = 0
        # Moves on every change, the list's or not (a unit probed for the first time,
        # a probe's failure message): what a DRA edge follows. ListAndWatch does not.
        self._detail = 0
        self._messages: dict[str, str] = {}  # unit ID -> why its last probe failed
        self._closed = False
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        return self._version

    @property
    def detail(self) -> int:
        return self._detail

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
        if failure is None:
            if self._messages.pop(unit_id, None) is None:
                return
        elif self._messages.get(unit_id) == failure:
            return
        else:
            self._messages[unit_id] = failure
        self._touch()

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
        if self._probed is None:
            return self._unhealthy | self._incomplete
        return self._unhealthy | self._incomplete | (self._units.keys() - self._probed)

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
    def unbounded(self) -> bool:
        return self._free is not None

    def devices(self) -> tuple[DeviceInfo, ...]:
        if self._devices is None:
            self._devices = tuple(self.device_list())
        return self._devices

    def device_list(self) -> Sequence[DeviceInfo]:
        """The current list as a lazy sequence: ListAndWatch sends what fits in
        4 MiB, and must not build a million objects to send 175,000."""
        out = self._out()
        if self._free is None:
            return DeviceList(self._listed_units(), self._count, out)
        # Unbounded: each unit lists what is held plus a few, so the list is short.
        return tuple(
            DeviceInfo(
                id=replica_id(unit.id, i), healthy=unit.id not in out, numa_node=unit.numa_node
            )
            for unit in self._listed_units()
            for i in self._indices(unit.id)
        )

    def counts(self) -> tuple[int, int]:
        """(devices, healthy devices) without building the list."""
        out = self._out()
        if self._free is not None:
            sizes = {u.id: len(self._indices(u.id)) for u in self._listed_units()}
            return sum(sizes.values()), sum(n for uid, n in sizes.items() if uid not in out)
        listed = self._units.keys() | self._gone.keys()
        healthy = sum(1 for uid in listed if uid not in out)
        return len(listed) * self._count, healthy * self._count

    def set_units(self, units: Iterable[Unit]) -> bool:
        """Replace the units; True when the device list changed.

        A unit that is gone now but held stays listed, Unhealthy, until
        ``set_in_use`` no longer shows it held.
        """
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

    def set_count(self, count: int) -> bool:
        self._count = count
        return self._refresh()

    def set_sharing(self, count: int, free_ids: int | None) -> bool:
        """``count`` IDs per unit, or (``free_ids`` given) unbounded with that many free."""
        self._count, self._free = count, free_ids
        return self._refresh()

    def set_in_use(self, device_ids: Iterable[str]) -> tuple[str, ...]:
        """What containers hold now (this resource's device IDs); returns the
        vanished units this drops from the list (their last holder is gone).

        A held ID of a unit never seen (it vanished while the daemon was down)
        is listed as a unit without nodes, Unhealthy, so the kubelet keeps
        seeing what its checkpoint holds.
        """
        held: dict[str, set[str]] = {}
        for device_id in device_ids:
            held.setdefault(unit_id_of(device_id), set()).add(device_id)
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

    def known(self, device_id: str) -> bool:
        """Whether ``device_id`` is one of ours now (``replica_ids`` of a current unit).

        Parsed, not looked up in the device list: an Allocate costs what the
        kubelet sent, not the million IDs of ``count: 1000`` over 1000 units.
        """
        unit_id, sep, index = split_replica_id(device_id)
        if unit_id not in self._units and unit_id not in self._gone:
            return False
        if self._free is not None:
            # Any index: the kubelet may pick a free ID we have just stopped listing.
            return replica_index(device_id) is not None
        if self._count <= 1:
            return not sep
        return (
            index.isascii()
            and index.isdigit()
            and str(int(index)) == index
            and int(index) < self._count
        )

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
            unit_id = unit_id_of(device_id)
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

    async def wait_detail(self, detail: int) -> int | None:
        """Wait until ``detail`` differs from this one; None once closed."""
        while not self._closed and self._detail == detail:
            await self._changed.wait()
        return None if self._closed else self._detail

    async def wait_changed(self, version: int) -> int | None:
        """Wait until the version differs from ``version``; None once closed."""
        while not self._closed and self._version == version:
            await self._changed.wait()
        return None if self._closed else self._version

    def close(self) -> None:
        """End every waiter (streams end on shutdown)."""
        self._closed = True
        self._wake()

    def _out(self) -> frozenset[str]:
        """Units listed Unhealthy: by health, during cleanup, or gone."""
        return self.unhealthy | self._cleaning | self._gone.keys()

    def _listed_units(self) -> tuple[Unit, ...]:
        if not self._gone:
            return tuple(self._units.values())
        return tuple(sorted((*self._units.values(), *self._gone.values()), key=lambda u: u.id))

    def _indices(self, unit_id: str) -> tuple[int, ...]:
        """Replica indices an unbounded unit lists: held ones, plus free ones while present."""
        held = (replica_index(d) for d in self._held.get(unit_id, ()))
        free = self._free if unit_id in self._units and self._free is not None else 0
        return advertised_indices((i for i in held if i is not None), free)

    def _sign(self) -> tuple[object, ...]:
        """What the device list is made of: equal signatures, equal lists."""
        ids = self._units.keys()
        sharing: object = self._count
        if self._free is not None:
            sharing = tuple((u.id, self._indices(u.id)) for u in self._listed_units())
        return (
            tuple((u.id, u.numa_node) for u in self._units.values()),
            tuple(self._gone),
            sharing,
            frozenset(self.unhealthy & ids),
            frozenset(self._cleaning & ids),
        )

    def _touch(self) -> None:
        self._detail += 1
        self._wake()

    def _refresh(self) -> bool:
        self._detail += 1
        signature = self._sign()
        if signature == self._signature:
            self._wake()  # waiters on the version look and wait again
            return False
        self._signature, self._devices = signature, None
        self._version += 1
        self._wake()
        return True

    def _wake(self) -> None:
        # A fresh event per change: waiters hold the old one, which stays set.
        old, self._changed = self._changed, asyncio.Event()
        old.set()


class DeviceList(Sequence[DeviceInfo]):
    """The device list of one state version, made one device at a time.

    In unit ID order, each unit's replicas in order (``replica_ids``); a unit
    is Healthy unless it is in ``out`` (unhealthy or being cleaned up).
    """

    def __init__(self, units: tuple[Unit, ...], count: int, out: frozenset[str]) -> None:
        self._units = units
        self._count = max(count, 1)
        self._out = out

    def __len__(self) -> int:
        return len(self._units) * self._count

    @overload
    def __getitem__(self, index: int) -> DeviceInfo: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[DeviceInfo]: ...

    def __getitem__(self, index: int | slice) -> DeviceInfo | Sequence[DeviceInfo]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        unit = self._units[index // self._count]
        return self._device(unit, index % self._count)

    def __iter__(self) -> Iterator[DeviceInfo]:
        for unit in self._units:
            for replica in range(self._count):
                yield self._device(unit, replica)

    def _device(self, unit: Unit, replica: int) -> DeviceInfo:
        device_id = unit.id if self._count == 1 else replica_id(unit.id, replica)
        return DeviceInfo(id=device_id, healthy=unit.id not in self._out, numa_node=unit.numa_node)
