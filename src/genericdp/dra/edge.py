"""One resource's DRA edge: its units and health into the driver's inventory and slices.

A unit whose nodes vanish while a prepared claim holds it (``DraUsage``, the runtime's
``gone``) stays in both, Unhealthy ("device nodes gone: ..."), tainted in the slice, until the
claim is unprepared, as the device plugin keeps such a unit listed until its pod is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Protocol

from genericdp.aio import wait_any
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.dra.inventory import Inventory
from genericdp.errors import GenericdpError, ellipsized, first_of
from genericdp.kubeletplugin.registration import RegistrationService
from genericdp.kubeletplugin.slices import DeviceOptions
from genericdp.runtime.edge import PluginStatus
from genericdp.runtime.state import DeviceState

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024  # what the kubelet passes on to the pod's allocatedResourcesStatus


class Publisher(Protocol):
    """The contract's ``SlicePublisher`` (``kubeletplugin/publisher.py``), as an edge uses it."""

    def expect(self, resource: str) -> None: ...

    async def publish(
        self,
        resource: str,
        units: Sequence[Unit],
        unhealthy: AbstractSet[str],
        *,
        options: DeviceOptions = ...,
    ) -> None: ...

    async def withdraw(self, resource: str) -> None: ...


class DraEdge:
    """The DRA side of one resource (``runtime.edge.Edge``)."""

    task = "dra"

    def __init__(
        self,
        definition: Callable[[], ResourceDefinition],
        state: DeviceState,
        *,
        inventory: Inventory,
        publisher: Publisher,
        registration: RegistrationService,
        stopping: Callable[[], bool] = lambda: False,
        on_status: Callable[[], None] = lambda: None,
        uncleaned: Callable[[str], AbstractSet[str]] = lambda _: frozenset(),
    ) -> None:
        self._definition = definition
        self.state = state
        self._inventory = inventory
        self._publisher = publisher
        self._registration = registration
        self._stopping = stopping
        self._on_status = on_status  # what ``status()`` shows changed
        self._uncleaned = uncleaned  # units owed a cleanup that cannot run: never served
        self._refreshed = asyncio.Event()
        publisher.expect(definition().name)
        self._woken = asyncio.Event()
        self._last_error: str | None = None
        self.handed = asyncio.Event()  # the first scan went to the inventory and the slices

    async def run(self) -> None:
        """After the first scan, follow the state until it is closed: the inventory
        first (prepare and health read it), then the slices."""
        await self._woken.wait()
        while not self.state.closed:
            changed = self.state.next_change()  # before reading: no change is missed
            self._refreshed.clear()
            await self._sync()
            if not self.handed.is_set():
                self.handed.set()
                self._on_status()
            await wait_any((changed, self._refreshed), None)

    def refresh(self) -> None:
        """Publish again: what the driver keeps out of service changed."""
        self._refreshed.set()

    async def _sync(self) -> None:
        definition = self._definition()
        out = self._uncleaned(definition.name)
        # With those gone while a claim holds them; without those owed a cleanup.
        units = tuple(u for u in self.state.listed_units() if u.id not in out)
        gone = self.state.gone
        unhealthy = self.state.unhealthy | gone
        self._inventory.set_resource(definition, units)
        probed = self.state.probed
        self._inventory.set_health(
            definition.name,
            unhealthy,
            (probed if probed is not None else {u.id for u in units}) | gone,
            self._health_messages(units, gone),
        )
        try:
            await self._publisher.publish(
                definition.name, units, unhealthy, options=DeviceOptions.of(definition)
            )
        except GenericdpError as exc:
            self._failed(f"cannot publish the ResourceSlice of {definition.name}: {exc}")
        else:
            if self._last_error is not None:
                self._last_error = None
                self._on_status()

    def _health_messages(self, units: Sequence[Unit], gone: AbstractSet[str]) -> Mapping[str, str]:
        """Why each unit is Unhealthy: its nodes gone, its probe's failure, else its
        missing required nodes."""
        messages = dict(self.state.probe_messages)
        for unit in units:
            if unit.id in gone:
                messages[unit.id] = gone_message(unit)
            elif unit.missing and unit.id not in messages:
                messages[unit.id] = "required device node(s) missing: " + ", ".join(unit.missing)
        return messages

    def wake(self) -> None:
        """The first scan is done: publish from now on."""
        self._woken.set()

    def status(self) -> PluginStatus:
        units = self.state.units_view()
        out = self.state.unhealthy | self.state.cleaning
        return PluginStatus(
            resource=self._definition().name,
            registered=self._registration.registered and self.handed.is_set(),
            # /readyz waits for this: registered, and the first scan in the inventory and on
            # its way to the slices (docs/dra.md).
            registrations=self._registration.registrations if self.handed.is_set() else 0,
            devices=len(units),  # one DRA device per unit, shared by claims under ``count``
            healthy=sum(1 for uid in units if uid not in out),
            last_error=self._last_error or self._registration.last_error,
            units=len(units),
        )

    async def close(self) -> tuple[str, ...]:
        """The resource left the config: its devices and slices go. At shutdown the slices
        stay for the next instance, so pods keep being scheduled to the node through a
        restart (the kubelet deletes them if the driver stays away 30 s)."""
        name = self._definition().name
        self._inventory.remove_resource(name)
        if not self._stopping():
            try:
                await self._publisher.withdraw(name)
            except GenericdpError as exc:
                log.warning("cannot withdraw the ResourceSlice of %s: %s", name, exc)
        self.state.close()
        return ()

    def _failed(self, message: str) -> None:
        if message != self._last_error:
            log.error("%s", message)
            self._last_error = message
            self._on_status()


def gone_message(unit: Unit) -> str:
    """What the health stream says of a unit unplugged while a claim holds it."""
    paths = [node.host_path for node in unit.nodes]
    found = first_of(paths, 16, empty="not found since the daemon started")
    return ellipsized(f"device nodes gone: {found}", MAX_MESSAGE)
