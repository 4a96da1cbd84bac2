"""The PodResources client: flattening the kubelet's answer and failing clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from genericdp.errors import KubeletError
from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.kubelet.podresources import PodDevices, pod_devices_from
from tests.kubelet_fakes import EmbeddedKubelet, list_pod_devices


def devices(resource: str, *ids: str, numa: int | None = None) -> pr.ContainerDevices:
    topology = pr.TopologyInfo(nodes=[pr.NUMANode(ID=numa)]) if numa is not None else None
    return pr.ContainerDevices(resource_name=resource, device_ids=list(ids), topology=topology)


def test_per_device_entries_are_merged_per_container_and_resource() -> None:
    """The kubelet lists one entry per device and NUMA node; we get one per resource."""
    response = pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="p1",
                namespace="ns",
                containers=[
                    pr.ContainerResources(
                        name="c1",
                        devices=[
                            devices("example.com/a", "a1", numa=0),
                            devices("example.com/b", "b1"),
                            devices("example.com/a", "a2", numa=0),
                            devices("example.com/a", "a2", numa=1),  # on two NUMA nodes
                        ],
                    ),
                    pr.ContainerResources(name="cpu-only", cpu_ids=[1, 2]),
                ],
            )
        ]
    )
    assert pod_devices_from(response.SerializeToString()) == (
        PodDevices("ns", "p1", "c1", "example.com/a", ("a1", "a2")),
        PodDevices("ns", "p1", "c1", "example.com/b", ("b1",)),
    )


def test_empty_answer_is_no_devices() -> None:
    """A node without pods holding devices yields an empty tuple."""
    assert pod_devices_from(b"") == ()


async def test_missing_socket_is_a_kubelet_error(base: Path) -> None:
    """No PodResources server gives a KubeletError naming the socket."""
    socket = base / "pod-resources" / "kubelet.sock"
    with pytest.raises(KubeletError, match=r"PodResources List on .* failed: UNAVAILABLE"):
        await list_pod_devices(socket, timeout=1.0)


async def test_lists_nothing_from_an_idle_kubelet(base: Path) -> None:
    """The embedded kubelet's PodResources socket answers List with no allocations."""
    socket = base / "pod-resources" / "kubelet.sock"
    async with EmbeddedKubelet(base / "dp", pod_resources_socket=socket):
        assert await list_pod_devices(socket) == ()
