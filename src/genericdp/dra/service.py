"""The DRA gRPC services the kubelet calls on the driver's socket: protobuf in, our types out.

- ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and its ``v1beta1`` twin (same
  messages, kept for 1.32/1.33 kubelets): NodePrepareResources and
  NodeUnprepareResources, answered by ``prepare.Preparer``.
- ``v1alpha1.DRAResourceHealth``: NodeWatchResources, a stream of every
  device's health from ``inventory.Inventory``. The kubelet stamps each
  report with its own clock and turns a device Unknown when it has not
  heard of it for 30 s (``DefaultHealthTimeout`` in
  pkg/kubelet/cm/dra/healthinfo.go), so the whole list is sent at once,
  again on every change, and at least every ``HEARTBEAT`` seconds.

All three share one ``grpc.aio`` server on one unix socket
(``/var/lib/kubelet/plugins/<driver>/dra.sock``), as the kubelet dials one
endpoint for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from genericdp.dra.api import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from genericdp.dra.api import drahealth_v1alpha1_pb2 as health_pb
from genericdp.dra.api import drahealth_v1alpha1_pb2_grpc as health_grpc
from genericdp.dra.claims import ClaimRef
from genericdp.dra.inventory import Health, Inventory
from genericdp.dra.prepare import ClaimResult, Preparer
from genericdp.unixgrpc import UnixServer, serve

log = logging.getLogger(__name__)

_Context = grpc.aio.ServicerContext[Any, Any]

# "<gRPC package>.<service>" as the kubelet lists them (servicesSupportedByKubelet,
# pkg/kubelet/cm/dra/plugin), newest first: it takes the first it knows.
DRA_V1 = "v1.DRAPlugin"
DRA_V1BETA1 = "v1beta1.DRAPlugin"
HEALTH_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
SERVICES = (DRA_V1, DRA_V1BETA1, HEALTH_V1ALPHA1)
HEARTBEAT = 10.0  # seconds between full health reports when nothing changes
MAX_HEALTH_MESSAGE = 1024  # the kubelet cuts longer messages

_HEALTH = {
    Health.UNKNOWN: health_pb.UNKNOWN,
    Health.HEALTHY: health_pb.HEALTHY,
    Health.UNHEALTHY: health_pb.UNHEALTHY,
}


def _claims(request: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]


class _DraPlugin:
    """One version of the DRAPlugin service over ``module``'s messages."""

    def __init__(self, preparer: Preparer, module: ModuleType) -> None:
        self._preparer = preparer
        self._pb = module

    async def NodePrepareResources(  # noqa: N802 -- the gRPC method name
        self, request: Any, context: _Context
    ) -> Any:
        answer = await self._preparer.prepare(_claims(request))
        response = self._pb.NodePrepareResourcesResponse()
        for uid, result in answer.items():
            response.claims[uid].CopyFrom(self._claim(result))
        return response

    async def NodeUnprepareResources(  # noqa: N802 -- the gRPC method name
        self, request: Any, context: _Context
    ) -> Any:
        answer = await self._preparer.unprepare(_claims(request))
        response = self._pb.NodeUnprepareResourcesResponse()
        for uid, error in answer.items():
            response.claims[uid].error = error
        return response

    def _claim(self, result: ClaimResult) -> Any:
        if result.error:
            log.warning("NodePrepareResources: %s", result.error)
            return self._pb.NodePrepareResourceResponse(error=result.error)
        return self._pb.NodePrepareResourceResponse(
            devices=[
                self._pb.Device(
                    request_names=[d.request] if d.request else [],
                    pool_name=d.pool,
                    device_name=d.device,
                    cdi_device_ids=list(d.cdi_ids),
                )
                for d in result.devices
            ]
        )


class DraPluginV1(_DraPlugin, dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        super().__init__(preparer, dra_v1_pb2)


class DraPluginV1beta1(_DraPlugin, dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        super().__init__(preparer, dra_v1beta1_pb2)


class HealthService(health_grpc.DRAResourceHealthServicer):
    """NodeWatchResources: the inventory's health, whole, on change and every heartbeat."""

    def __init__(self, inventory: Inventory, *, heartbeat: float = HEARTBEAT) -> None:
        self._inventory = inventory
        self._heartbeat = heartbeat
        self.streams = 0  # open now

    def report(self) -> health_pb.NodeWatchResourcesResponse:
        now = int(time.time())
        pool = self._inventory.pool
        return health_pb.NodeWatchResourcesResponse(
            devices=[
                health_pb.DeviceHealth(
                    device=health_pb.DeviceIdentifier(pool_name=pool, device_name=d.device),
                    health=_HEALTH[d.health],
                    last_updated_time=int(d.updated) or now,
                    message=d.message[:MAX_HEALTH_MESSAGE],
                )
                for d in self._inventory.health()
            ]
        )

    async def NodeWatchResources(  # noqa: N802 -- the gRPC method name
        self, request: health_pb.NodeWatchResourcesRequest, context: _Context
    ) -> AsyncIterator[health_pb.NodeWatchResourcesResponse]:
        self.streams += 1
        log.info("the kubelet opened the DRA health stream")
        try:
            version = self._inventory.version
            while True:
                yield self.report()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._heartbeat):
                        version = await self._inventory.wait_changed(version)
        finally:
            self.streams -= 1
            log.info("the DRA health stream ended")


class DraServer:
    """The driver's gRPC server on its DRA socket."""

    def __init__(self, server: UnixServer, health: HealthService) -> None:
        self._server = server
        self.socket = server.socket
        self.health = health

    @classmethod
    async def start(
        cls,
        preparer: Preparer,
        inventory: Inventory,
        socket: Path,
        *,
        heartbeat: float = HEARTBEAT,
        services: Sequence[str] = SERVICES,
    ) -> DraServer:
        """Serve on ``socket`` (replacing a stale file); raises KubeletError when it cannot."""
        health = HealthService(inventory, heartbeat=heartbeat)
        v1, v1beta1 = DraPluginV1(preparer), DraPluginV1beta1(preparer)

        def add_services(server: grpc.aio.Server) -> None:
            if DRA_V1 in services:
                dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(v1, server)  # type: ignore[no-untyped-call]
            if DRA_V1BETA1 in services:
                dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(v1beta1, server)  # type: ignore[no-untyped-call]
            if HEALTH_V1ALPHA1 in services:
                health_grpc.add_DRAResourceHealthServicer_to_server(health, server)  # type: ignore[no-untyped-call]

        server = await serve(socket, add_services, what="DRA", make_dir=True)
        return cls(server, health)

    def intact(self) -> bool:
        """Whether the socket we bound is still there (not deleted, not replaced)."""
        return self._server.intact()

    async def stop(self, grace: float | None = 1.0) -> None:
        await self._server.stop(grace)
