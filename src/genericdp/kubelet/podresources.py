"""Client of the kubelet's PodResources API (``v1.PodResourcesLister/List``).

The kubelet has no deallocation call; the runtime learns which devices are
still in use by polling List and diffing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import grpc
from google.protobuf.message import DecodeError

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


class PodResourcesLister:
    """Every (pod, container, resource) holding devices, as the kubelet reports it.

    One channel is kept from call to call (a channel per call cost more CPU than all
    else an idle daemon does); a failed call (KubeletError) closes it, so the next one
    reaches a restarted kubelet's socket. A worker thread digests the answer's bytes and,
    unless they repeat the last answer (then the very tuple given last time comes back,
    so the caller can tell by identity), parses them one pod at a time, keeping only
    ``resources`` (docs/contributing/architecture.md has the figures).
    """

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        # target -> ((digest of the bytes, resources kept), the answer made of them)
        self._last: dict[str, tuple[_Key, tuple[PodDevices, ...]]] = {}

    async def __call__(
        self,
        socket: Path,
        *,
        timeout: float = 5.0,  # noqa: ASYNC109 -- sent to the kubelet as the gRPC deadline
        resources: AbstractSet[str] | None = None,
    ) -> tuple[PodDevices, ...]:
        """``resources``: keep only these (None: every resource)."""
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
        kept = None if resources is None else frozenset(resources)
        last = self._last.get(target)
        key, pods = await asyncio.to_thread(_taken, raw, kept, last[0] if last else None)
        if pods is None:
            assert last is not None  # noqa: S101 -- _taken answers None only for the last key
            return last[1]
        self._last[target] = (key, pods)
        return pods

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        self._last.clear()
        for channel in channels:
            await channel.close(None)


_Key = tuple[bytes, frozenset[str] | None]


def _taken(
    raw: bytes, resources: frozenset[str] | None, last: _Key | None
) -> tuple[_Key, tuple[PodDevices, ...] | None]:
    """The answer's key, and its devices (None: the key is ``last``)."""
    key = (hashlib.blake2b(raw, digest_size=16).digest(), resources)
    if key == last:
        return key, None
    try:
        return key, pod_devices_from(raw, resources)
    except (DecodeError, ValueError) as exc:
        raise KubeletError(f"PodResources List answer cannot be parsed: {exc}") from exc


def pod_devices_from(
    raw: bytes, resources: AbstractSet[str] | None = None
) -> tuple[PodDevices, ...]:
    """A List answer (its bytes) as one entry per (pod, container, resource) of
    ``resources`` (None: every one), merging the kubelet's one ContainerDevices per
    device and NUMA node; containers without devices are left out."""
    merged: dict[tuple[str, str, str, str], dict[str, None]] = {}
    for pod in _pods(raw):
        for container in pod.containers:
            for devices in container.devices:
                if resources is not None and devices.resource_name not in resources:
                    continue
                key = (pod.namespace, pod.name, container.name, devices.resource_name)
                ids = merged.setdefault(key, {})
                ids.update(dict.fromkeys(devices.device_ids))
    return tuple(PodDevices(*key, device_ids=tuple(ids)) for key, ids in merged.items() if ids)


_POD_RESOURCES = (1 << 3) | 2  # ListPodResourcesResponse.pod_resources: field 1, length-delimited


def _pods(raw: bytes) -> Iterator[pr.PodResources]:
    """The answer's pods, parsed one at a time: one parse of a whole answer would hold the
    GIL, and so the event loop, for as long as it takes."""
    pos = 0
    while pos < len(raw):
        tag, pos = _varint(raw, pos)
        wire = tag & 7
        if wire == 0:
            _, pos = _varint(raw, pos)
            continue
        if wire in (1, 5):  # fixed64, fixed32
            pos += 8 if wire == 1 else 4
            continue
        if wire != 2:  # noqa: PLR2004 -- length-delimited
            raise ValueError(f"wire type {wire} at byte {pos}")
        length, pos = _varint(raw, pos)
        if pos + length > len(raw):
            raise ValueError(f"a field of {length} bytes at byte {pos} runs past the end")
        if tag == _POD_RESOURCES:
            yield pr.PodResources.FromString(raw[pos : pos + length])
        pos += length


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(raw) or shift > 63:  # noqa: PLR2004 -- a varint is at most 10 bytes
            raise ValueError(f"a varint cut short at byte {pos}")
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:  # noqa: PLR2004 -- the continuation bit
            return value, pos
        shift += 7
