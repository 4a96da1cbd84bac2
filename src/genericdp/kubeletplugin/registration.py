"""The kubelet plugin registration service, on the driver's socket in ``plugins_registry``.

The kubelet's plugin watcher (modelled in ``dra/embedded/kubelet.py``) calls ``GetInfo`` on
each new socket, chooses the first DRA service it knows among ``supported_versions`` (health
too: ``service.py``), dials ``endpoint`` and answers with ``NotifyRegistrationStatus``. A
removed socket deregisters the driver, so the socket is created again, by serving again,
whenever it is deleted or replaced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from genericdp.errors import clip
from genericdp.grpcservices import service_handler
from genericdp.kubeletplugin.api import pluginregistration_pb2 as reg_pb
from genericdp.unixgrpc import UnixServer, serve

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"


class RegistrationService:
    """GetInfo and NotifyRegistrationStatus; remembers the kubelet's last verdict."""

    def __init__(self, driver: str, endpoint: Path, services: Sequence[str]) -> None:
        self._info = reg_pb.PluginInfo(
            type=PLUGIN_TYPE, name=driver, endpoint=str(endpoint), supported_versions=list(services)
        )
        self.registered = False
        self.registrations = 0  # successful verdicts since start
        self.last_error: str | None = None
        # Called at each verdict: every resource's status shows the registration.
        self.on_change: Callable[[], None] = lambda: None

    async def GetInfo(  # noqa: N802 -- the gRPC method name
        self,
        request: reg_pb.InfoRequest,  # noqa: ARG002 -- the gRPC method's signature
        context: grpc.aio.ServicerContext[Any, Any],  # noqa: ARG002 -- the gRPC method's signature
    ) -> reg_pb.PluginInfo:
        return self._info

    async def NotifyRegistrationStatus(  # noqa: N802 -- the gRPC method name
        self,
        request: reg_pb.RegistrationStatus,
        context: grpc.aio.ServicerContext[Any, Any],  # noqa: ARG002 -- the gRPC method's signature
    ) -> reg_pb.RegistrationStatusResponse:
        self.registered = request.plugin_registered
        if request.plugin_registered:
            self.registrations += 1
            self.last_error = None
            log.info("the kubelet registered DRA driver %s", self._info.name)
        else:
            self.last_error = clip(request.error, 1024)
            log.error("the kubelet refused DRA driver %s: %s", self._info.name, self.last_error)
        self.on_change()
        return reg_pb.RegistrationStatusResponse()


class RegistrationServer:
    """The registration service on its socket, served again whenever the socket is lost."""

    def __init__(self, service: RegistrationService, socket: Path) -> None:
        self.service = service
        self.socket = socket
        self._server: UnixServer | None = None

    async def start(self) -> None:
        """Serve (replacing a stale file); raises KubeletError when it cannot bind."""
        await self._stop_server()
        self._server = await serve(
            self.socket,
            [service_handler(reg_pb.DESCRIPTOR.services_by_name["Registration"], self.service)],
            what="plugin registration",
            make_dir=True,
        )

    def intact(self) -> bool:
        """Whether the socket we bound is still there (not deleted, not replaced)."""
        return self._server is not None and self._server.intact()

    async def stop(self) -> None:
        """Remove the socket first (the kubelet deregisters us), then stop serving."""
        if self._server is not None:
            self._server.remove()
        await self._stop_server()

    async def _stop_server(self) -> None:
        # Only our own socket goes: the one at this fixed name may be a newer instance's.
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.5, only_ours=True)
