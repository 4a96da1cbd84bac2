"""Client of the kubelet's PodResources API (``v1.PodResourcesLister/List``).

The kubelet has no deallocation call; the runtime learns which devices are
still in use by polling List and diffing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import grpc

from genericdp.errors import KubeletError, clip
from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.unixgrpc import unix_address

# The kubelet's List answer covers every pod on the node; allow more than gRPC's 4 MiB.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
LIST_METHOD = "/v1.PodResourcesLister/List"


@dataclass(frozen=True)
class PodDevices:
    """The devices of one resource that one container of one pod holds."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


async def list_pod_devices(
    socket: Path,
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 -- sent to the kubelet as the gRPC deadline
) -> tuple[PodDevices, ...]:
    """Every (pod, container, resource) holding devices, as the kubelet reports it,
    over a channel of its own. Raises KubeletError when the socket is missing,
    unreachable or slow."""
    lister = PodResourcesLister()
    try:
        return await lister(socket, timeout=timeout)
    finally:
        await lister.close()


class PodResourcesLister:
    """``list_pod_devices`` over one channel kept from call to call (a channel per call
    cost more CPU than everything else an idle daemon does). A failed call closes
    the channel, so the next one connects afresh (a restarted kubelet's socket).

    An answer that repeats the last one byte for byte (an idle node's every poll)
    gives the very tuple it gave last time, so the caller can tell by identity.
    A new answer is parsed in a worker thread, off the loop serving Allocate.
    """

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._last: dict[str, tuple[bytes, tuple[PodDevices, ...]]] = {}

    async def __call__(
        self,
        socket: Path,
        *,
        timeout: float = 5.0,  # noqa: ASYNC109 -- sent to the kubelet as the gRPC deadline
    ) -> tuple[PodDevices, ...]:
        target = unix_address(socket)
        channel = self._channels.get(target)
        if channel is None:
            options = [("grpc.max_receive_message_length", MAX_RESPONSE_BYTES)]
            channel = self._channels[target] = grpc.aio.insecure_channel(target, options=options)
        # No deserializer: the raw bytes, compared before anything is parsed.
        list_call = channel.unary_unary(
            LIST_METHOD,
            request_serializer=pr.ListPodResourcesRequest.SerializeToString,
            response_deserializer=None,
        )
        try:
            raw = await list_call(pr.ListPodResourcesRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            del self._channels[target]
            self._last.pop(target, None)
            await channel.close(None)
            raise KubeletError(
                f"PodResources List on {socket} failed: {exc.code().name}:"
                f" {clip(exc.details() or '', 300)}"
            ) from exc
        if not isinstance(raw, bytes):
            raise TypeError("a PodResources answer that is not bytes")
        last = self._last.get(target)
        if last is not None and last[0] == raw:
            return last[1]
        pods = await asyncio.to_thread(_parsed, raw)
        self._last[target] = (raw, pods)
        return pods

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._last.clear()
        for channel in channels:
            await channel.close(None)


def _parsed(raw: bytes) -> tuple[PodDevices, ...]:
    """A List answer's bytes, parsed and flattened (in a worker thread)."""
    return pod_devices_from(pr.ListPodResourcesResponse.FromString(raw))


def pod_devices_from(response: pr.ListPodResourcesResponse) -> tuple[PodDevices, ...]:
    """Flatten a List answer into one entry per (pod, container, resource), merged
    (the kubelet sends one ContainerDevices per device and NUMA node); containers
    without devices are left out."""
    merged: dict[tuple[str, str, str, str], dict[str, None]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                key = (pod.namespace, pod.name, container.name, devices.resource_name)
                ids = merged.setdefault(key, {})
                ids.update(dict.fromkeys(devices.device_ids))
    return tuple(
        PodDevices(
            namespace=namespace,
            pod=pod,
            container=container,
            resource_name=resource,
            device_ids=tuple(ids),
        )
        for (namespace, pod, container, resource), ids in merged.items()
        if ids
    )
