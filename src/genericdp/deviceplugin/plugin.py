"""One resource's device plugin: the edge the runner drives, the backend the servicer calls.
Its ``Allocator`` and ``Cleaner`` are its own: no other backend allocates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from genericdp import logsetup
from genericdp.allocation.plan import Allocation
from genericdp.config.model import ResourceDefinition
from genericdp.deviceplugin.allocator import Allocator
from genericdp.deviceplugin.cleanup import Cleaner
from genericdp.deviceplugin.kubeletwatch import DirChange
from genericdp.deviceplugin.options import plugin_options
from genericdp.deviceplugin.preferred import preferred_allocation
from genericdp.deviceplugin.registrar import Registrar
from genericdp.deviceplugin.replicas import counts, device_list
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.kubelet.devices import DeviceInfo
from genericdp.kubelet.options import PluginOptions
from genericdp.kubelet.servicer import PreferredRequest, serve_plugin
from genericdp.runtime.backend import ResourceParts
from genericdp.runtime.edge import PluginStatus
from genericdp.runtime.owed import Release
from genericdp.runtime.state import DeviceState

_Answer = TypeVar("_Answer")


class ResourcePlugin:
    """The device-plugin edge of one resource (``runtime.edge.Edge``, ``Kickable``) and the
    ``Backend`` of its gRPC servicer (``kubelet/servicer.py``)."""

    task = "registration"

    def __init__(self, parts: ResourceParts, *, plugin_dir: Path, usage: UsageTracker) -> None:
        self._definition: Callable[[], ResourceDefinition] = parts.definition
        self.state: DeviceState = parts.state
        self.cleaner = Cleaner(parts)
        self._allocator = Allocator(parts, usage=usage, cleaner=self.cleaner)
        self._registrar = Registrar(
            lambda: self._definition().name,
            self.options,
            parts.context,
            lambda path: serve_plugin(self, path),
            plugin_dir=plugin_dir,
        )

    # -- the Edge the runner uses ------------------------------------------------

    def status(self) -> PluginStatus:
        registrar = self._registrar
        devices, healthy = counts(self.state)
        return PluginStatus(
            resource=self.resource,
            socket=registrar.socket,
            registered=registrar.registered,
            registrations=registrar.registrations,
            devices=devices,
            healthy=healthy,
            last_error=registrar.last_error,
            units=len(self.state.units_view()),
            fault=self.state.fault,
            streams=registrar.streams,
        )

    def wake(self) -> None:
        self._registrar.wake("start")

    def kick(self, reason: str, *, renew: bool = False) -> None:
        """Register again unless the registration in place is sound;
        ``renew``: on a fresh socket (the options changed)."""
        self._registrar.wake(reason, renew=renew)

    def plugin_dir_changed(self, change: DirChange) -> None:
        self._registrar.plugin_dir_changed(change)

    async def run(self) -> None:
        await self._registrar.run()

    async def close(self) -> tuple[str, ...]:
        """End the streams, stop the server and remove its socket; running cleanups
        get 5 s to finish."""
        self.state.close()
        await self._registrar.close()
        return await self.cleaner.stop()

    def released(self, release: Release) -> None:
        """Nobody holds this unit any more (seen by the PodResources poller)."""
        with logsetup.fields(resource=self.resource, unit=release.unit_id):
            self.cleaner.released(release)

    # -- the Backend the gRPC servicer calls --------------------------------------

    @property
    def resource(self) -> str:
        return self._definition().name

    def options(self) -> PluginOptions:
        return plugin_options(self._definition())

    def devices(self) -> tuple[int, Sequence[DeviceInfo]]:
        return self.state.version, device_list(self.state)

    async def wait_devices(self, version: int) -> int | None:
        return await self.state.wait_changed(version)

    def stream_opened(self) -> int:
        return self._registrar.stream_opened()

    def stream_closed(self, token: int, *, by_peer: bool) -> None:
        self._registrar.stream_closed(token, by_peer=by_peer)

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        policy = self._definition().preferred_allocation
        units = self.state.units_view()
        return [
            preferred_allocation(
                policy, available=r.available, must_include=r.must_include, size=r.size, units=units
            )
            for r in requests
        ]

    async def allocate(
        self, requests: Sequence[tuple[str, ...]], encode: Callable[[Sequence[Allocation]], _Answer]
    ) -> _Answer:
        return await self._allocator.allocate(requests, encode)

    async def pre_start(self, device_ids: tuple[str, ...]) -> None:
        await self._allocator.pre_start(device_ids)
