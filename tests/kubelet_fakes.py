"""A minimal device plugin on a real unix socket, for testing the kubelet side.

It is deliberately not genericdp's plugin: it lets a test script exactly what
the kubelet sees (devices, options, preferred IDs, failures) and records every
call the kubelet makes.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from genericdp.grpcservices import service_handler
from genericdp.kubelet import embedded
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded.endpoint import PluginEndpoint
from genericdp.kubelet.options import HEALTHY, PluginOptions
from genericdp.kubelet.podresources import PodDevices, PodResourcesLister
from genericdp.kubelet.registration import register

_Context = grpc.aio.ServicerContext[object, object]

SERIAL = "example.com/serial"


def device(device_id: str, health: str = "Healthy", numa: Sequence[int] = ()) -> pb.Device:
    """A ListAndWatch device entry."""
    topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=n) for n in numa]) if numa else None
    return pb.Device(ID=device_id, health=health, topology=topology)


@dataclass
class FakePlugin:
    """Scripted DevicePlugin servicer; push lists with ``send``, end the stream with ``end``."""

    devices: list[pb.Device]
    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False
    preferred: list[str] = field(default_factory=list)
    allocate_error: str | None = None
    pre_start_error: str | None = None
    allocate_requests: list[pb.AllocateRequest] = field(default_factory=list)
    preferred_requests: list[pb.PreferredAllocationRequest] = field(default_factory=list)
    pre_start_requests: list[list[str]] = field(default_factory=list)
    streams_opened: int = 0
    stream_cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    _updates: asyncio.Queue[list[pb.Device] | None] = field(default_factory=asyncio.Queue)

    def send(self, devices: list[pb.Device]) -> None:
        """Push a new full device list on the open stream."""
        self._updates.put_nowait(devices)

    def end(self) -> None:
        """Finish the ListAndWatch stream cleanly, as a plugin shutting down."""
        self._updates.put_nowait(None)

    async def GetDevicePluginOptions(self, request: pb.Empty, context: _Context) -> object:  # noqa: ARG002 -- the gRPC method's signature
        return pb.DevicePluginOptions(
            pre_start_required=self.pre_start_required,
            get_preferred_allocation_available=self.get_preferred_allocation_available,
        )

    async def ListAndWatch(
        self,
        request: pb.Empty,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        self.streams_opened += 1
        ended = False
        try:
            yield pb.ListAndWatchResponse(devices=self.devices)
            while (update := await self._updates.get()) is not None:
                yield pb.ListAndWatchResponse(devices=update)
            ended = True
        finally:
            # Cancelled by the client: gRPC cancels the handler's task, which reaches this
            # generator as CancelledError when it waits for an update, or, when the task
            # was still sending (a loaded machine), as GeneratorExit once it is closed.
            if not ended:
                self.stream_cancelled.set()

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> object:
        self.preferred_requests.append(request)
        return pb.PreferredAllocationResponse(
            container_responses=[pb.ContainerPreferredAllocationResponse(deviceIDs=self.preferred)]
        )

    async def Allocate(self, request: pb.AllocateRequest, context: _Context) -> object:
        self.allocate_requests.append(request)
        if self.allocate_error is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.allocate_error)
        return pb.AllocateResponse(
            container_responses=[
                pb.ContainerAllocateResponse(envs={"IDS": ",".join(r.devices_ids)})
                for r in request.container_requests
            ]
        )

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: _Context
    ) -> object:
        self.pre_start_requests.append(list(request.devices_ids))
        if self.pre_start_error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.pre_start_error)
        return pb.PreStartContainerResponse()


@asynccontextmanager
async def serving(plugin: FakePlugin, socket: Path) -> AsyncIterator[grpc.aio.Server]:
    """Serve ``plugin`` on ``socket`` for the duration of the block."""
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [service_handler(pb.DESCRIPTOR.services_by_name["DevicePlugin"], plugin)]
    )
    server.add_insecure_port(f"unix:{socket}")
    await server.start()
    try:
        yield server
    finally:
        await server.stop(None)


@contextmanager
def short_tmp_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="gdp", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def registered(
    kubelet: EmbeddedKubelet,
    plugin: FakePlugin,
    *,
    name: str = SERIAL,
    endpoint: str = "serial.sock",
    options: PluginOptions | None = None,
) -> AsyncIterator[None]:
    """Serve ``plugin`` in the kubelet's directory and register it."""
    async with serving(plugin, kubelet.plugin_dir / endpoint):
        await register(
            kubelet.socket,
            endpoint=endpoint,
            resource_name=name,
            options=options or PluginOptions(),
        )
        yield


def three_devices() -> list[pb.Device]:
    """Two healthy devices on NUMA nodes 0 and 1, one unhealthy without topology."""
    return [device("d1", numa=[0]), device("d2", "Unhealthy"), device("d3", numa=[1])]


def has(name: str, *, capacity: int, allocatable: int) -> Callable[[EmbeddedKubelet], bool]:
    """A wait_until predicate on one resource's counts."""

    def check(kubelet: EmbeddedKubelet) -> bool:
        snap = kubelet.resources.get(name)
        return snap is not None and (snap.capacity, snap.allocatable) == (capacity, allocatable)

    return check


async def list_pod_devices(socket: Path, *, timeout: float = 5.0) -> tuple[PodDevices, ...]:  # noqa: ASYNC109 -- the gRPC deadline
    """The kubelet's PodResources List at ``socket``, over a channel of its own."""
    lister = PodResourcesLister()
    try:
        return await lister(socket, timeout=timeout)
    finally:
        await lister.close()


class EmbeddedKubelet(embedded.EmbeddedKubelet):
    """``simulate``'s embedded kubelet, with a container's ``allocatedResourcesStatus``
    (KEP-4680, beta and on by default since 1.36)."""

    def __init__(self, plugin_dir: Path, **kwargs: Any) -> None:
        super().__init__(plugin_dir, **kwargs)
        # The health each device had in the last ListAndWatch message (the manager's
        # ``allDevices``): a stream ending changes allocatable, not this.
        self._listed: dict[str, dict[str, str]] = {}

    async def start(self) -> None:
        await super().start()
        self._listed.clear()  # known resources list no device until they register again

    def allocated_resources_status(
        self, namespace: str, pod: str, container: str = "main"
    ) -> dict[str, dict[str, str]]:
        """resource -> device ID -> ``Healthy`` or ``Unhealthy``, as
        ``UpdateAllocatedResourcesStatus`` in 1.36's device manager: each held ID
        takes the health of the last ListAndWatch message that listed it; an ID no
        message lists any more reads ``Healthy`` (the kubelet's default), and anything
        but the exact string ``Healthy`` reads ``Unhealthy``. A plugin whose stream
        ended keeps its last healths."""
        found: dict[str, dict[str, str]] = {}
        for held in self.pod_devices():
            if (held.namespace, held.pod, held.container) != (namespace, pod, container):
                continue
            listed = (
                self._listed.get(held.resource_name, {})
                if held.resource_name in self.resources
                else {}
            )
            found[held.resource_name] = {
                device_id: "Healthy" if listed.get(device_id, HEALTHY) == HEALTHY else "Unhealthy"
                for device_id in held.device_ids
            }
        return found

    def _on_list(self, endpoint: PluginEndpoint, response: pb.ListAndWatchResponse) -> None:
        super()._on_list(endpoint, response)
        if self._current(endpoint) is not None:
            self._listed[endpoint.resource] = {d.ID: d.health for d in response.devices}
