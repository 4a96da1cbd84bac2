"""The kubelet's ``v1.PodResourcesLister`` over the embedded kubelet's allocations: as the
real one, one ContainerDevices per device and NUMA node (no topology when it has none),
pods and containers in the order admitted."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import grpc

from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.kubelet.embedded.state import ContainerAllocation, ResourceSnapshot

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
    def __init__(
        self,
        allocations: Callable[[], Sequence[ContainerAllocation]],
        resources: Callable[[], Mapping[str, ResourceSnapshot]],
    ) -> None:
        self._allocations = allocations
        self._resources = resources

    async def List(  # noqa: N802 -- the gRPC method name
        self,
        request: pr.ListPodResourcesRequest,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> pr.ListPodResourcesResponse:
        """Every pod holding devices."""
        return pr.ListPodResourcesResponse(pod_resources=pod_resources(self._allocations()))

    async def Get(  # noqa: N802 -- the gRPC method name
        self, request: pr.GetPodResourcesRequest, context: _Context
    ) -> pr.GetPodResourcesResponse:
        """One pod, or the kubelet's not-found error."""
        mine = [
            a
            for a in self._allocations()
            if a.pod == request.pod_name and a.namespace == request.pod_namespace
        ]
        if not mine:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return pr.GetPodResourcesResponse(pod_resources=pod_resources(mine)[0])

    async def GetAllocatableResources(  # noqa: N802 -- the gRPC method name
        self,
        request: pr.AllocatableResourcesRequest,  # noqa: ARG002 -- the gRPC method's signature
        context: _Context,  # noqa: ARG002 -- the gRPC method's signature
    ) -> pr.AllocatableResourcesResponse:
        """Healthy devices of every resource."""
        devices: list[pr.ContainerDevices] = []
        for snap in self._resources().values():
            healthy = [d for d in snap.devices.values() if d.healthy]
            numa = {d.id: d.numa_nodes for d in healthy}
            devices.extend(container_devices(snap.name, (d.id for d in healthy), numa))
        return pr.AllocatableResourcesResponse(devices=devices)
