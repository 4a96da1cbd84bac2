"""Pod admission for device resources, and the record of who holds what.

The kubelet's ``allocateContainerResources``/``devicesToAllocate`` for one container:
healthy, unallocated IDs; GetPreferredAllocation only when advertised (no Topology
Manager, see ``choose_devices``); one Allocate with one container request and no
deadline; PreStartContainer (30 s) when required. The chosen IDs count as allocated
while Allocate is in flight (``allocatedDevices``). ``allocations`` is its in-memory
``podDevices``: a container that already holds devices gets the recorded answer again
without a new Allocate, as from the checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

import grpc

from genericdp.errors import KubeletError
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded.endpoint import PluginEndpoint, rpc_error
from genericdp.kubelet.embedded.state import ContainerAllocation, EventKind, ResourceState

_Key = tuple[str, str, str, str]  # namespace, pod, container, resource
Recorder = Callable[[EventKind, str, str], None]
UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
PRE_START_FAILED = "PreStartContainerError"


class AllocationError(KubeletError):
    """The kubelet could not give a container its devices; ``reason`` is what it puts on
    the pod (``UnexpectedAdmissionError``, or ``PreStartContainerError``)."""

    def __init__(
        self, message: str, *, reason: str = UNEXPECTED_ADMISSION, plain: str = ""
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.plain = plain  # for a person, shown by ``simulate``; empty: the message says it


def admission_error(cause: str, plain: str = "") -> AllocationError:
    """The kubelet's wording for a failed device admission; PLAIN says it for a person."""
    return AllocationError(f"Allocate failed due to {cause}, which is unexpected", plain=plain)


def choose_devices(
    available: Sequence[str], count: int, preferred: Sequence[str] = ()
) -> tuple[str, ...]:
    """``count`` IDs of ``available``: the available preferred ones first, then the rest.

    Without a Topology Manager every device is in the "no affinity" set, which Go
    iterates in random order; we take the plugin's list order, so runs repeat.
    """
    if count > len(available):
        raise ValueError(f"cannot choose {count} of {len(available)} devices")
    allowed = set(available)
    return tuple(dict.fromkeys(d for d in (*preferred, *available) if d in allowed))[:count]


class Admission:
    """Admits containers against the kubelet's live resource state."""

    def __init__(
        self,
        states: Mapping[str, ResourceState],
        endpoints: Mapping[str, PluginEndpoint],
        record: Recorder,
    ) -> None:
        self._states = states  # the kubelet's live views
        self._endpoints = endpoints
        self._record = record
        self.allocations: dict[_Key, ContainerAllocation] = {}
        self._responses: dict[_Key, pb.AllocateResponse] = {}
        self._lock = asyncio.Lock()
        # resource -> IDs of the Allocate in flight; restored on failure, as the kubelet
        self._allocating: dict[str, tuple[str, ...]] = {}

    def allocated(self, resource: str) -> frozenset[str]:
        """IDs of ``resource`` held by some container, or being allocated to one."""
        return frozenset(
            device_id
            for alloc in self.allocations.values()
            if alloc.resource == resource
            for device_id in alloc.device_ids
        ).union(self._allocating.get(resource, ()))

    async def allocate(
        self,
        resource: str,
        count: int,
        *,
        pod: str,
        container: str = "main",
        namespace: str = "default",
    ) -> pb.AllocateResponse:
        """The plugin's answer for one container asking for ``count`` devices;
        AllocationError as the kubelet would fail the pod."""
        if count < 1:
            raise AllocationError(f"a container must ask for at least 1 {resource}, not {count}")
        key = (namespace, pod, container, resource)
        who = f"{namespace}/{pod}/{container}"
        async with self._lock:  # the kubelet admits pods one at a time
            try:
                response = await self._admit(key, count)
            except AllocationError as exc:
                self._record(EventKind.ALLOCATION_FAILED, resource, f"{who}: {exc}")
                raise
        state = self._states.get(resource)
        if state is not None and state.options is not None and state.options.pre_start_required:
            await self._pre_start(key, who)
        return response

    async def _admit(self, key: _Key, count: int) -> pb.AllocateResponse:
        namespace, pod, container, resource = key
        existing = self.allocations.get(key)
        if existing is not None:
            if len(existing.device_ids) != count:
                raise AllocationError(
                    f'pod "{namespace}/{pod}" container "{container}" changed request for '
                    f'resource "{resource}" from {len(existing.device_ids)} to {count}'
                )
            return self._responses[key]  # replayed from the checkpoint, no new Allocate
        state, endpoint, available = self._available(resource, count)
        preferred: tuple[str, ...] = ()
        if state.options is not None and state.options.get_preferred_allocation_available:
            try:
                preferred = await endpoint.get_preferred_allocation(available, count)
            except grpc.aio.AioRpcError as exc:
                raise admission_error(
                    f"device plugin GetPreferredAllocation rpc failed with err: {rpc_error(exc)}"
                ) from exc
        chosen = choose_devices(available, count, preferred)
        self._allocating = {resource: chosen}
        try:
            response = await endpoint.allocate(chosen)
        except grpc.aio.AioRpcError as exc:
            raise admission_error(rpc_error(exc)) from exc
        finally:
            self._allocating = {}
        if not response.container_responses:
            raise admission_error(f"no containers return in allocation response {response}")
        numa = {d: state.devices[d].numa_nodes for d in chosen if d in state.devices}
        self.allocations[key] = ContainerAllocation(
            namespace, pod, container, resource, chosen, numa
        )
        self._responses[key] = response
        self._record(
            EventKind.ALLOCATED, resource, f"{namespace}/{pod}/{container}: {', '.join(chosen)}"
        )
        return response

    def _available(
        self, resource: str, count: int
    ) -> tuple[ResourceState, PluginEndpoint, list[str]]:
        state = self._states.get(resource)
        if state is None:
            raise admission_error(f"cannot allocate unregistered device {resource}")
        healthy = state.healthy_ids()
        if not healthy:
            raise admission_error(
                f"no healthy devices present; cannot allocate unhealthy devices {resource}",
                plain=f"every device of {resource} is unhealthy (ALLOCATABLE 0), so no pod"
                " gets one; the log says why (its health probe or a missing node): fix the"
                " device or its health check",
            )
        taken = self.allocated(resource)
        available = [device_id for device_id in healthy if device_id not in taken]
        if len(available) < count:
            raise admission_error(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {count}, Available: {len(available)}",
                plain=f"{count} device(s) of {resource} asked for, {len(available)} free and"
                " healthy; ask for fewer, or free or add devices",
            )
        endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise admission_error(f"unknown Device Plugin {resource}")
        return state, endpoint, available

    async def _pre_start(self, key: _Key, who: str) -> None:
        resource = key[3]
        endpoint = self._endpoints.get(resource)
        alloc = self.allocations.get(key)
        try:
            if endpoint is None or alloc is None:
                raise KubeletError(
                    f"endpoint not found in cache for a registered resource: {resource}"
                )
            await endpoint.pre_start_container(alloc.device_ids)
        except (grpc.aio.AioRpcError, KubeletError) as exc:
            cause = rpc_error(exc) if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            error = AllocationError(
                f"device plugin PreStartContainer rpc failed with err: {cause}",
                reason=PRE_START_FAILED,
            )
            self._record(EventKind.ALLOCATION_FAILED, resource, f"{who}: {error}")
            raise error from exc

    def release(self, namespace: str, pod: str) -> int:
        """Forget a deleted pod's allocations; return how many devices were freed."""
        keys = [k for k in self.allocations if k[0] == namespace and k[1] == pod]
        freed = 0
        for key in keys:
            freed += len(self.allocations.pop(key).device_ids)
            self._responses.pop(key, None)
            self._record(EventKind.RELEASED, key[3], f"{namespace}/{pod}/{key[2]}")
        return freed
