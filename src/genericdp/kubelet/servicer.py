"""The ``v1beta1.DevicePlugin`` gRPC service: protobuf in, our types out, and back.

The behaviour lives behind ``Backend`` (``deviceplugin/plugin.py``); its errors become
gRPC statuses here, meant for the pod's events.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol, TypeVar

import grpc

from genericdp.errors import (
    CdiSpecError,
    GenericdpError,
    HookError,
    InvalidDevicesError,
    RecordError,
    TemplateRenderError,
    UnsafeAllocationError,
    cut,
)
from genericdp.grpcservices import service_handler
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.devices import DeviceInfo
from genericdp.kubelet.options import HEALTHY, UNHEALTHY, PluginOptions
from genericdp.unixgrpc import MAX_MESSAGE_BYTES, UnixServer, serve

log = logging.getLogger(__name__)

_Answer = TypeVar("_Answer")
_Context = grpc.aio.ServicerContext[object, object]

# A status message is an HTTP/2 header (8 KiB by default) and ends up in the pod's events.
MAX_STATUS_CHARS = 1024


@dataclass(frozen=True)
class PreferredRequest:
    """One container's GetPreferredAllocation request."""

    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


class DeviceNodeSpec(Protocol):
    """A device node a container receives (``allocation.devices.DeviceSpec``)."""

    @property
    def container_path(self) -> str: ...

    @property
    def host_path(self) -> str: ...

    @property
    def permissions(self) -> str: ...


class MountSpec(Protocol):
    """A host path mounted into a container (``allocation.plan.Mount``)."""

    @property
    def container_path(self) -> str: ...

    @property
    def host_path(self) -> str: ...

    @property
    def read_only(self) -> bool: ...


class ContainerAnswer(Protocol):
    """What one container receives (``allocation.plan.Allocation``, not imported here)."""

    @property
    def devices(self) -> Sequence[DeviceNodeSpec]: ...

    @property
    def mounts(self) -> Sequence[MountSpec]: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...

    @property
    def cdi_devices(self) -> Sequence[str]: ...


class Backend(Protocol):
    """What one resource's plugin provides to the gRPC service."""

    @property
    def resource(self) -> str: ...

    def options(self) -> PluginOptions: ...

    def devices(self) -> tuple[int, Sequence[DeviceInfo]]:
        """The current version and device list (maybe lazy: iterate, do not copy)."""

    async def wait_devices(self, version: int) -> int | None:
        """Wait for a version other than ``version``; None when the plugin stops."""

    async def allocate(
        self,
        requests: Sequence[tuple[str, ...]],
        encode: Callable[[Sequence[ContainerAnswer]], _Answer],
    ) -> _Answer:
        """Plan the containers' allocations, ``encode`` the answer, then commit them
        (claims, init hooks): whatever ``encode`` refuses has had no side effect."""

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]: ...

    async def pre_start(self, device_ids: tuple[str, ...]) -> None: ...

    def stream_opened(self) -> int:
        """A ListAndWatch stream opened; returns a token for ``stream_closed``."""

    def stream_closed(self, token: int, *, by_peer: bool) -> None: ...


def list_response(devices: Sequence[DeviceInfo], *, resource: str) -> pb.ListAndWatchResponse:
    """The whole list as one message, clipped (with an error log) to stay under 4 MiB.

    The kubelet replaces its list with each message, so a list cannot be split; the tail
    of one that does not fit (a config problem) is left out rather than have the kubelet
    drop the stream.
    """
    response = pb.ListAndWatchResponse()
    total = 0
    for info in devices:
        device = response.devices.add(ID=info.id, health=HEALTHY if info.healthy else UNHEALTHY)
        if info.numa_node is not None:
            device.topology.nodes.add(ID=info.numa_node)
        # 1 tag byte + the length as a varint (7 bits a byte) + the device itself
        item = device.ByteSize()
        item += 1 + max(1, (item.bit_length() + 6) // 7)
        if total + item > MAX_MESSAGE_BYTES:
            del response.devices[-1]
            log.error(
                "resource %s: %d devices need more than the %d-byte gRPC message limit;"
                " advertising only the first %d: lower count or split the resource",
                resource,
                len(devices),
                MAX_MESSAGE_BYTES,
                len(response.devices),
            )
            break
        total += item
    return response


def allocate_response(allocations: Sequence[ContainerAnswer]) -> pb.AllocateResponse:
    """One container response per allocation, in order; UnsafeAllocationError over the
    kubelet's 4 MiB (the allocator calls this before it commits anything)."""
    response = pb.AllocateResponse()
    for allocation in allocations:
        _fill(response.container_responses.add(), allocation)
    size = response.ByteSize()
    if size > MAX_MESSAGE_BYTES:
        raise UnsafeAllocationError(
            f"the Allocate answer for {len(allocations)} container(s) would be {size} bytes,"
            f" over the kubelet's {MAX_MESSAGE_BYTES}-byte message limit:"
            " make the allocate templates render less"
        )
    return response


def _fill(response: pb.ContainerAllocateResponse, allocation: ContainerAnswer) -> None:
    """Fill ``response`` in place: a third of the time of building each field first.
    Maps item by item: a protobuf map's update() is the generic Python one, slower."""
    envs, annotations = response.envs, response.annotations
    for key, value in allocation.env.items():
        envs[key] = value
    for key, value in allocation.annotations.items():
        annotations[key] = value
    for m in allocation.mounts:
        response.mounts.add(
            container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
        )
    for d in allocation.devices:
        response.devices.add(
            container_path=d.container_path, host_path=d.host_path, permissions=d.permissions
        )
    for name in allocation.cdi_devices:
        response.cdi_devices.add(name=name)


def options_message(options: PluginOptions) -> pb.DevicePluginOptions:
    """``options`` as GetDevicePluginOptions and Register send them."""
    return pb.DevicePluginOptions(
        pre_start_required=options.pre_start_required,
        get_preferred_allocation_available=options.get_preferred_allocation_available,
    )


class DevicePluginServicer:
    """Serves one resource's ``Backend`` over gRPC."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def GetDevicePluginOptions(  # noqa: N802 -- the gRPC method name
        self,
        request: pb.Empty,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> pb.DevicePluginOptions:
        return options_message(self._backend.options())

    async def ListAndWatch(  # noqa: N802 -- the gRPC method name
        self,
        request: pb.Empty,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        backend = self._backend
        token = backend.stream_opened()
        by_peer = True  # unless we end it: a cancelled stream means the kubelet went away
        try:
            while True:
                version, devices = backend.devices()
                yield list_response(devices, resource=backend.resource)
                if await backend.wait_devices(version) is None:
                    by_peer = False
                    return
        finally:
            backend.stream_closed(token, by_peer=by_peer)

    async def GetPreferredAllocation(  # noqa: N802 -- the gRPC method name
        self,
        request: pb.PreferredAllocationRequest,
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> pb.PreferredAllocationResponse:
        requests = [
            PreferredRequest(
                available=tuple(r.available_deviceIDs),
                must_include=tuple(r.must_include_deviceIDs),
                size=r.allocation_size,
            )
            for r in request.container_requests
        ]
        answers = self._backend.preferred(requests)
        return pb.PreferredAllocationResponse(
            container_responses=[
                pb.ContainerPreferredAllocationResponse(deviceIDs=list(ids)) for ids in answers
            ]
        )

    async def Allocate(  # noqa: N802 -- the gRPC method name
        self, request: pb.AllocateRequest, context: _Context
    ) -> pb.AllocateResponse:
        requests = [tuple(r.devices_ids) for r in request.container_requests]
        try:
            return await self._backend.allocate(requests, allocate_response)
        except GenericdpError as exc:
            await self._abort(context, "Allocate", exc)

    async def PreStartContainer(  # noqa: N802 -- the gRPC method name
        self, request: pb.PreStartContainerRequest, context: _Context
    ) -> pb.PreStartContainerResponse:
        try:
            await self._backend.pre_start(tuple(request.devices_ids))
        except GenericdpError as exc:
            await self._abort(context, "PreStartContainer", exc)
        return pb.PreStartContainerResponse()

    async def _abort(self, context: _Context, call: str, exc: GenericdpError) -> NoReturn:
        code = _status_of(exc)
        message = cut(f"{self._backend.resource}: {exc}", MAX_STATUS_CHARS)
        log.warning("%s rejected (%s): %s", call, code.name, message)
        await context.abort(code, message)


def _status_of(exc: GenericdpError) -> grpc.StatusCode:
    if isinstance(exc, InvalidDevicesError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, (HookError, CdiSpecError, RecordError, UnsafeAllocationError)):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, TemplateRenderError):
        return grpc.StatusCode.INTERNAL
    return grpc.StatusCode.UNKNOWN


async def serve_plugin(backend: Backend, socket: Path) -> UnixServer:
    """Serve ``backend`` on ``socket``; raises KubeletError when it cannot bind."""
    handler = service_handler(
        pb.DESCRIPTOR.services_by_name["DevicePlugin"], DevicePluginServicer(backend)
    )
    return await serve(socket, [handler], what=backend.resource)
