"""The kubelet's ``v1.PodResourcesLister`` ``List`` over the embedded kubelet's allocations:
as the real one, one ContainerDevices per device and NUMA node (no topology when it has
none), pods and containers in the order admitted. ``Get`` and ``GetAllocatableResources``,
which the daemon never calls, answer UNIMPLEMENTED."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc

from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.kubelet.embedded.state import ContainerAllocation

_Context = grpc.aio.ServicerContext[object, object]


def container_devices(
    resource: str, device_ids: Iterable[str], numa: Mapping[str, Sequence[int]]
) -> list[pr.ContainerDevices]:
    return [
        pr.ContainerDevices(
            resource_name=resource,
            device_ids=[device_id],
            topology=None if node is None else pr.TopologyInfo(nodes=[pr.NUMANode(ID=node)]),
        )
        for device_id in device_ids
        for node in numa.get(device_id) or (None,)
    ]


def pod_resources(allocations: Iterable[ContainerAllocation]) -> list[pr.PodResources]:
    pods: dict[tuple[str, str], dict[str, list[pr.ContainerDevices]]] = {}
    for alloc in allocations:
        containers = pods.setdefault((alloc.namespace, alloc.pod), {})
        devices = containers.setdefault(alloc.container, [])
        devices.extend(container_devices(alloc.resource, alloc.device_ids, alloc.numa_nodes))
    return [
        pr.PodResources(
            name=pod,
            namespace=namespace,
            containers=[
                pr.ContainerResources(name=name, devices=devices)
                for name, devices in containers.items()
            ],
        )
        for (namespace, pod), containers in pods.items()
    ]


class PodResourcesServicer:
    def __init__(self, allocations: Callable[[], Sequence[ContainerAllocation]]) -> None:
        self._allocations = allocations

    async def List(  # noqa: N802 -- the gRPC method name
        self,
        request: pr.ListPodResourcesRequest,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> pr.ListPodResourcesResponse:
        """Every pod holding devices."""
        return pr.ListPodResourcesResponse(pod_resources=pod_resources(self._allocations()))
