"""A DRA resource's status changes are told as they happen, as the device plugin's are:
the first hand-over to the inventory and slices, each publish error and its end, and
each verdict of the kubelet on the driver's registration. ``Supervisor.wait_for`` and
``next_change()`` (simulate, node labels, the tests) wake on them, not on whatever
other change comes later."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path

from genericdp.discovery.model import Unit
from genericdp.dra.edge import DraEdge
from genericdp.dra.inventory import Inventory
from genericdp.errors import GenericdpError
from genericdp.kubeletplugin.api import pluginregistration_pb2 as reg_pb
from genericdp.kubeletplugin.registration import RegistrationService
from genericdp.kubeletplugin.slices import DEFAULT_OPTIONS, DeviceOptions
from genericdp.runtime.edge import PluginStatus
from genericdp.runtime.state import DeviceState
from tests.runtime_harness import config, unit
from tests.test_dra_backend import CONFIG, NAME, serving

DRIVER = "genericdp.io"


class Publisher:
    """Takes every publish, or fails it while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing: str | None = None
        self.published = asyncio.Event()

    def expect(self, resource: str) -> None:
        pass

    async def publish(
        self,
        resource: str,  # noqa: ARG002 -- the Publisher protocol's signature
        units: Sequence[Unit],  # noqa: ARG002 -- the Publisher protocol's signature
        unhealthy: AbstractSet[str],  # noqa: ARG002 -- the Publisher protocol's signature
        *,
        options: DeviceOptions = DEFAULT_OPTIONS,  # noqa: ARG002 -- the Publisher protocol's signature
    ) -> None:
        self.published.set()
        if self.failing:
            raise GenericdpError(self.failing)

    async def withdraw(self, resource: str) -> None:
        pass


def verdict(registered: bool, error: str = "") -> reg_pb.RegistrationStatus:
    return reg_pb.RegistrationStatus(plugin_registered=registered, error=error)


async def test_the_hand_over_and_publish_errors_are_told_at_once(tmp_path: Path) -> None:
    """The status each change shows is told in the same step: the driver registered and
    the first scan handed over (registered), a publish that fails (its error), the next
    that works (no error)."""
    definition = config(CONFIG).resources[0]
    state = DeviceState(units=[unit("ttyUSB0")])
    registration = RegistrationService(DRIVER, tmp_path / "dra.sock", ())
    publisher = Publisher()
    told: list[PluginStatus] = []
    edge = DraEdge(
        lambda: definition,
        state,
        inventory=Inventory("node-1"),
        publisher=publisher,
        registration=registration,
        on_status=lambda: told.append(edge.status()),
    )
    await registration.NotifyRegistrationStatus(verdict(registered=True), None)  # type: ignore[arg-type]
    task = asyncio.create_task(edge.run())
    try:
        assert not edge.status().registered
        edge.wake()
        await edge.handed.wait()
        assert [s.registered for s in told] == [True]

        publisher.failing = "the API server is gone"
        publisher.published.clear()
        state.set_units([unit("ttyUSB0"), unit("ttyUSB1")])
        await publisher.published.wait()
        await asyncio.sleep(0)  # the edge takes the failure in
        assert told[-1].last_error == (
            f"cannot publish the ResourceSlice of {NAME}: the API server is gone"
        )
        count = len(told)

        publisher.failing = None
        publisher.published.clear()
        state.set_units([unit("ttyUSB0")])
        await publisher.published.wait()
        await asyncio.sleep(0)
        assert len(told) == count + 1
        assert told[-1].last_error is None
    finally:
        state.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_registration_verdict_wakes_the_supervisors_waiters(base: Path) -> None:
    """The kubelet's verdict on the registration is a status change of every resource:
    ``next_change()`` is set by it, in the same step."""
    async with serving(base, CONFIG, [unit("ttyUSB0")]) as (s, _kubelet):
        await s.supervisor.wait_for(lambda statuses: statuses[NAME].registered)
        service = s.backend.driver.registration.service
        change = s.supervisor.next_change()
        await service.NotifyRegistrationStatus(verdict(registered=False, error="no"), None)  # type: ignore[arg-type]
        assert change.is_set()
        assert s.supervisor.status()[NAME].last_error == "no"
        assert not s.supervisor.status()[NAME].registered
        change = s.supervisor.next_change()
        await service.NotifyRegistrationStatus(verdict(registered=True), None)  # type: ignore[arg-type]
        assert change.is_set()
        assert s.supervisor.status()[NAME].registered
