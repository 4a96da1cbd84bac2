"""The embedded kubelet's admission edge cases."""

from __future__ import annotations

import grpc
import pytest

from genericdp.kubelet.embedded import AllocationError
from tests.kubelet_fakes import (
    SERIAL,
    EmbeddedKubelet,
    FakePlugin,
    device,
    has,
    registered,
    three_devices,
)


async def test_pre_start_failure_keeps_the_allocation(kubelet: EmbeddedKubelet) -> None:
    """A failing PreStartContainer fails the container start; the pod still holds its devices."""
    plugin = FakePlugin(three_devices(), pre_start_required=True, pre_start_error="no power")
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        with pytest.raises(
            AllocationError, match=r"PreStartContainer rpc failed.*no power"
        ) as caught:
            await kubelet.allocate(SERIAL, 1, pod="p1")
    assert caught.value.reason == "PreStartContainerError"
    assert [p.pod for p in kubelet.pod_devices()] == ["p1"]


async def test_preferred_allocation_error_fails_admission(kubelet: EmbeddedKubelet) -> None:
    """An error from GetPreferredAllocation fails the pod before any Allocate call."""
    plugin = FakePlugin(three_devices(), get_preferred_allocation_available=True)

    async def broken(request: object, context: grpc.aio.ServicerContext[object, object]) -> object:  # noqa: ARG001 -- the gRPC method's signature
        await context.abort(grpc.StatusCode.INTERNAL, "policy exploded")
        raise AssertionError  # abort raises

    plugin.GetPreferredAllocation = broken  # type: ignore[method-assign]
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        with pytest.raises(AllocationError, match=r"GetPreferredAllocation rpc failed.*exploded"):
            await kubelet.allocate(SERIAL, 1, pod="p1")
    assert plugin.allocate_requests == []


async def test_changed_request_for_an_admitted_container_fails(kubelet: EmbeddedKubelet) -> None:
    """A container that holds N devices cannot be admitted again asking for another count."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        await kubelet.allocate(SERIAL, 1, pod="p1")
        with pytest.raises(AllocationError, match=r"changed request .* from 1 to 2"):
            await kubelet.allocate(SERIAL, 2, pod="p1")


async def test_zero_devices_is_refused(kubelet: EmbeddedKubelet) -> None:
    """Asking for no devices is a clear error, not an empty Allocate."""
    with pytest.raises(AllocationError, match="at least 1"):
        await kubelet.allocate(SERIAL, 0, pod="p1")


async def test_unhealthy_only_resource_cannot_be_allocated(kubelet: EmbeddedKubelet) -> None:
    """With no healthy device the kubelet's 'no healthy devices' error is raised."""
    plugin = FakePlugin([device("d1", "Unhealthy")])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=1, allocatable=0))
        with pytest.raises(AllocationError, match="no healthy devices present"):
            await kubelet.allocate(SERIAL, 1, pod="p1")


async def test_released_devices_can_be_allocated_again(kubelet: EmbeddedKubelet) -> None:
    """After release the pod's devices are free for the next pod."""
    plugin = FakePlugin([device("d1")])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=1, allocatable=1))
        await kubelet.allocate(SERIAL, 1, pod="p1")
        with pytest.raises(AllocationError, match="Available: 0"):
            await kubelet.allocate(SERIAL, 1, pod="p2")
        assert kubelet.release("default", "p1") == 1
        await kubelet.allocate(SERIAL, 1, pod="p2")
    assert [p.pod for p in kubelet.pod_devices()] == ["p2"]
