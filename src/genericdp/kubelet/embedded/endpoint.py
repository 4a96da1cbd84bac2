"""The kubelet's connection to one registered device plugin (client.go, endpoint.go).

The dial blocks until connected, retrying a missing or refusing socket (grpc-go's
``WithBlock``). A stream that ends does not close the connection: only ``Disconnect``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc

from genericdp.aio import TaskSet
from genericdp.errors import KubeletError
from genericdp.grpcservices import Stub
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.options import PluginOptions
from genericdp.unixgrpc import MAX_MESSAGE_BYTES, unix_address

log = logging.getLogger(__name__)

PRE_START_TIMEOUT = 30.0  # pluginapi.KubeletPreStartContainerRPCTimeoutInSecs


OnList = Callable[["PluginEndpoint", pb.ListAndWatchResponse], None]
OnEnd = Callable[["PluginEndpoint", str], Awaitable[None]]


class EndpointError(KubeletError):
    """Dialing the plugin or asking for its options failed (Register is refused)."""


class PluginEndpoint:
    """One plugin socket the kubelet has dialed."""

    def __init__(self, resource: str, endpoint: str, socket: Path) -> None:
        self.resource = resource
        self.endpoint = endpoint  # the file name the plugin registered
        self.socket = socket
        self.closed = False
        self._channel: grpc.aio.Channel | None = None
        self._stub: Stub | None = None
        self._stream: asyncio.Task[None] | None = None
        self._ended = False  # ListAndWatch returned (the task may still be finishing)

    @property
    def streaming(self) -> bool:
        return self._stream is not None and not self._stream.done() and not self._ended

    async def connect(self, dial_timeout: float) -> PluginOptions:
        """Dial the socket and return what GetDevicePluginOptions answers."""
        try:
            target = unix_address(self.socket)
        except KubeletError as exc:
            raise EndpointError(f"failed to dial device plugin: {exc}") from exc
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        self._channel = grpc.aio.insecure_channel(target, options=options)
        self._stub = Stub(self._channel, pb.DESCRIPTOR.services_by_name["DevicePlugin"])
        try:
            async with asyncio.timeout(dial_timeout):
                await self._channel.channel_ready()
            reply = await self._stub.GetDevicePluginOptions(pb.Empty())
        except TimeoutError as exc:
            await self.close()
            raise EndpointError("failed to dial device plugin: context deadline exceeded") from exc
        except grpc.aio.AioRpcError as exc:
            await self.close()
            raise EndpointError(f"failed to get device plugin options: {rpc_error(exc)}") from exc
        except BaseException:
            await self.close()  # cancelled (the kubelet stopping): never leak the channel
            raise
        return PluginOptions(reply.pre_start_required, reply.get_preferred_allocation_available)

    def watch(self, tasks: TaskSet, on_list: OnList, on_end: OnEnd) -> None:
        """Read ListAndWatch in the background; ``on_end`` gets why it stopped."""
        name = f"list-and-watch {self.resource} {self.endpoint}"
        self._stream = tasks.run(name, self._read(on_list, on_end))

    async def _read(self, on_list: OnList, on_end: OnEnd) -> None:
        reason = "stream closed by the plugin"
        try:
            call = self._api().ListAndWatch(pb.Empty())
            async for response in call:
                on_list(self, response)
        except grpc.aio.AioRpcError as exc:
            reason = rpc_error(exc)
        except KubeletError as exc:  # closed before the stream opened
            reason = str(exc)
        self._ended = True
        await on_end(self, reason)

    async def get_preferred_allocation(
        self, available: Sequence[str], size: int
    ) -> tuple[str, ...]:
        """The plugin's preferred IDs for one container; must-include is empty without a
        Topology Manager."""
        request = pb.PreferredAllocationRequest(
            container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available), allocation_size=size
                )
            ]
        )
        response = await self._api().GetPreferredAllocation(request)
        if not response.container_responses:
            return ()
        return tuple(response.container_responses[0].deviceIDs)

    async def allocate(self, device_ids: Sequence[str]) -> pb.AllocateResponse:
        """One Allocate call for one container, with no deadline (as the kubelet)."""
        request = pb.AllocateRequest(
            container_requests=[pb.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        response: pb.AllocateResponse = await self._api().Allocate(request)
        return response

    async def pre_start_container(self, device_ids: Sequence[str]) -> None:
        """PreStartContainer with the kubelet's 30 s deadline."""
        request = pb.PreStartContainerRequest(devices_ids=list(device_ids))
        await self._api().PreStartContainer(request, timeout=PRE_START_TIMEOUT)

    async def close(self) -> None:
        """Stop reading and hang up."""
        self.closed = True
        if self._stream is not None and self._stream is not asyncio.current_task():
            self._stream.cancel()
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None

    def _api(self) -> Stub:
        if self._stub is None or self.closed:
            raise KubeletError(f"endpoint {self.endpoint} of {self.resource} is closed")
        return self._stub


def rpc_error(exc: grpc.aio.AioRpcError) -> str:
    """A gRPC error as grpc-go prints one in kubelet messages."""
    code = exc.code()
    words = "".join(part.capitalize() for part in code.name.split("_"))
    return f"rpc error: code = {words} desc = {exc.details()}"
