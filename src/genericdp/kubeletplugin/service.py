"""The DRA gRPC services the kubelet calls on the driver's socket: protobuf in, our types out.

All four share one ``grpc.aio`` server on one unix socket, as the kubelet dials one endpoint:

- ``v1.DRAPlugin`` and its ``v1beta1`` twin (for 1.32/1.33 kubelets): NodePrepareResources
  and NodeUnprepareResources, answered by a ``ClaimPreparer`` (``dra.prepare.Preparer``).
- ``v1.DRAResourceHealth`` and its ``v1alpha1`` twin (1.34 to 1.36 know only v1alpha1, 1.37
  to 1.39 prefer v1): NodeWatchResources streams every device's health from a
  ``HealthSource`` (``dra.inventory.Inventory``). A kubelet opens it only for a version among
  the registration's ``supported_versions``, so both are listed there. The kubelet turns a
  device Unknown when it has not heard of it for 30 s (``DefaultHealthTimeout``,
  pkg/kubelet/cm/dra/healthinfo.go), so the whole list is sent at once, on every change and at
  least every ``HEARTBEAT`` seconds; each message (at most ``MAX_HEALTH_MESSAGE`` characters)
  says why a device is not Healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import grpc

from genericdp.errors import ellipsized
from genericdp.grpcservices import service_handler
from genericdp.kubeletplugin.api import (
    dra_v1_pb2,
    dra_v1beta1_pb2,
    drahealth_v1_pb2,
    drahealth_v1alpha1_pb2,
)
from genericdp.kubeletplugin.claims import ClaimRef
from genericdp.unixgrpc import UnixServer, serve

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

# "<gRPC package>.<service>" as the kubelet lists them (servicesSupportedByKubelet,
# pkg/kubelet/cm/dra/plugin), newest first: it takes the first it knows.
DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
HEALTH_V1 = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
SERVICES = (DRA_V1, DRA_V1BETA1, HEALTH_V1, HEALTH_V1ALPHA1)
_MODULES: dict[str, ModuleType] = {
    DRA_V1: dra_v1_pb2,
    DRA_V1BETA1: dra_v1beta1_pb2,
    HEALTH_V1: drahealth_v1_pb2,
    HEALTH_V1ALPHA1: drahealth_v1alpha1_pb2,
}
HEARTBEAT = 10.0  # seconds between full health reports when nothing changes
MAX_HEALTH_MESSAGE = 1024  # the kubelet cuts longer messages to 1021 characters and "..."


class Health(IntEnum):
    """A device's health, numbered as the health status enum of both API versions."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


class Device(Protocol):
    """A prepared device as the kubelet is told of it (``dra.checkpoint.PreparedDevice``)."""

    @property
    def request(self) -> str: ...
    @property
    def pool(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def cdi_ids(self) -> Sequence[str]: ...
    @property
    def share_id(self) -> str: ...


class PrepareResult(Protocol):
    """One claim's answer: its devices, or why it failed (``dra.prepare.ClaimResult``)."""

    @property
    def devices(self) -> Sequence[Device]: ...
    @property
    def error(self) -> str: ...


class ClaimPreparer(Protocol):
    """What the kubelet's prepare and unprepare calls are answered by: one entry per claim UID."""

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]: ...
    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class DeviceHealth:
    """What the health stream says about one device."""

    device: str
    health: Health
    message: str
    updated: float  # unix time of the probe (or of the last change) it comes from


class HealthSource(Protocol):
    """The devices' health and a version that moves when it changes."""

    @property
    def pool(self) -> str: ...
    @property
    def version(self) -> int: ...
    def health(self) -> Sequence[DeviceHealth]: ...
    async def wait_changed(self, version: int) -> int: ...


def _claims(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]


class _DraPlugin:
    """One version of the DRAPlugin service over ``module``'s messages."""

    def __init__(self, preparer: ClaimPreparer, module: ModuleType) -> None:
        self._preparer = preparer
        self._pb = module

    async def NodePrepareResources(  # noqa: N802 -- the gRPC method name
        self,
        request: Any,
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> Any:
        answer = await self._preparer.prepare(_claims(request))
        response = self._pb.NodePrepareResourcesResponse()
        for uid, result in answer.items():
            response.claims[uid].CopyFrom(self._claim(result))
        return response

    async def NodeUnprepareResources(  # noqa: N802 -- the gRPC method name
        self,
        request: Any,
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> Any:
        answer = await self._preparer.unprepare(_claims(request))
        response = self._pb.NodeUnprepareResourcesResponse()
        for uid, error in answer.items():
            response.claims[uid].error = error
        return response

    def _claim(self, result: PrepareResult) -> Any:
        if result.error:
            log.warning("NodePrepareResources: %s", result.error)
            return self._pb.NodePrepareResourceResponse(error=result.error)
        answer = self._pb.NodePrepareResourceResponse()
        for d in result.devices:
            device = answer.devices.add(
                request_names=[d.request] if d.request else [],
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=list(d.cdi_ids),
            )
            if d.share_id and self._pb is dra_v1_pb2:  # v1beta1 has no share_id
                device.share_id = d.share_id
        return answer


class HealthService:
    """NodeWatchResources, both versions: the inventory's health, whole, on change and every
    heartbeat."""

    def __init__(self, inventory: HealthSource, *, heartbeat: float = HEARTBEAT) -> None:
        self._inventory = inventory
        self._heartbeat = heartbeat
        self.streams = 0  # open now, either version
        self.opened: dict[str, int] = {}  # service -> streams opened since start

    def report(self, module: ModuleType) -> Any:
        """Every device's health now, as ``module``'s NodeWatchResourcesResponse."""
        now = int(time.time())
        pool = self._inventory.pool
        return module.NodeWatchResourcesResponse(
            devices=[
                module.DeviceHealth(
                    device=module.DeviceIdentifier(pool_name=pool, device_name=d.device),
                    health=int(d.health),
                    last_updated_time=int(d.updated) or now,
                    message=ellipsized(d.message, MAX_HEALTH_MESSAGE, "..."),
                )
                for d in self._inventory.health()
            ]
        )

    async def watch(self, service: str, module: ModuleType) -> AsyncIterator[Any]:
        self.streams += 1
        self.opened[service] = self.opened.get(service, 0) + 1
        log.info("the kubelet opened the DRA health stream (%s)", service)
        try:
            version = self._inventory.version
            while True:
                yield self.report(module)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._heartbeat):
                        version = await self._inventory.wait_changed(version)
        finally:
            self.streams -= 1
            log.info("the DRA health stream (%s) ended", service)


class _HealthServicer:
    """One version of DRAResourceHealth; an async generator itself, as grpc.aio streams."""

    def __init__(self, health: HealthService, service: str, module: ModuleType) -> None:
        self._health, self._service, self._module = health, service, module

    async def NodeWatchResources(  # noqa: N802 -- the gRPC method name
        self,
        request: Any,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> AsyncIterator[Any]:
        async for response in self._health.watch(self._service, self._module):
            yield response


class DraServer:
    """The driver's gRPC server on its DRA socket."""

    def __init__(self, server: UnixServer, health: HealthService) -> None:
        self._server = server
        self.socket = server.socket
        self.health = health

    @classmethod
    async def start(
        cls,
        preparer: ClaimPreparer,
        inventory: HealthSource,
        socket: Path,
        *,
        heartbeat: float = HEARTBEAT,
        services: Sequence[str] = SERVICES,
    ) -> DraServer:
        """Serve on ``socket`` (replacing a stale file); raises KubeletError when it cannot."""
        health = HealthService(inventory, heartbeat=heartbeat)
        handlers = []
        for api in services:
            module, kind = _MODULES[api], api.partition(".")[2]
            if kind == "DRAPlugin":
                servicer: object = _DraPlugin(preparer, module)
            else:
                servicer = _HealthServicer(health, api, module)
            handlers.append(service_handler(module.DESCRIPTOR.services_by_name[kind], servicer))
        server = await serve(socket, handlers, what="DRA", make_dir=True)
        return cls(server, health)

    def intact(self) -> bool:
        """Whether the socket we bound is still there (not deleted, not replaced)."""
        return self._server.intact()

    async def stop(self, grace: float | None = 1.0) -> None:
        await self._server.stop(grace)
