"""The embedded kubelet against a scripted device plugin on real unix sockets."""

from __future__ import annotations

import asyncio
import socket as socketlib
from pathlib import Path

import grpc
import pytest

from genericdp.errors import KubeletError, RegistrationError
from genericdp.grpcservices import Stub
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded import AllocationError, EventKind
from genericdp.kubelet.options import PluginOptions
from genericdp.kubelet.podresources import PodDevices
from genericdp.kubelet.registration import register
from tests.kubelet_fakes import (
    SERIAL,
    EmbeddedKubelet,
    FakePlugin,
    device,
    has,
    list_pod_devices,
    registered,
    three_devices,
)


async def test_registration_counts_capacity_and_healthy_allocatable(
    kubelet: EmbeddedKubelet,
) -> None:
    """Capacity counts every listed device, allocatable only exact-"Healthy" ones."""
    devices = [*three_devices(), device("d4", "healthy")]  # lowercase is not Healthy
    plugin = FakePlugin(devices)
    async with registered(kubelet, plugin):
        await kubelet.wait_until(lambda k: k.resources[SERIAL].capacity == 4)
        snap = kubelet.resources[SERIAL]
        assert snap.allocatable == 2
        assert snap.connected
        assert snap.registrations == 1
        assert snap.endpoint == "serial.sock"
        assert snap.devices["d1"].numa_nodes == (0,)
        assert snap.devices["d2"].health == "Unhealthy"
        assert [e.kind for e in kubelet.events if e.resource == SERIAL][:3] == [
            EventKind.DIALING,
            EventKind.REGISTERED,
            EventKind.DEVICES,
        ]


async def test_each_list_replaces_the_whole_device_list(kubelet: EmbeddedKubelet) -> None:
    """A later ListAndWatch message replaces the list; devices left out are gone."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(
            lambda k: SERIAL in k.resources and k.resources[SERIAL].capacity == 3
        )
        plugin.send([device("d9")])
        await kubelet.wait_until(lambda k: list(k.resources[SERIAL].devices) == ["d9"])
        assert kubelet.resources[SERIAL].allocatable == 1


async def test_bad_version_is_refused_with_status_unknown(kubelet: EmbeddedKubelet) -> None:
    """A Register with another API version gets UNKNOWN and the kubelet's message."""
    async with grpc.aio.insecure_channel(f"unix:{kubelet.socket}") as channel:
        stub = Stub(channel, pb.DESCRIPTOR.services_by_name["Registration"])
        request = pb.RegisterRequest(version="v1alpha", endpoint="x.sock", resource_name=SERIAL)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Register(request)
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    assert caught.value.details() == (
        'requested API version "v1alpha" is not supported by kubelet. '
        'Supported version is ["v1beta1"]'
    )
    assert kubelet.events[-1].kind == EventKind.REJECTED
    assert SERIAL not in kubelet.resources


@pytest.mark.parametrize(
    "name",
    [
        "serial",  # no domain
        "kubernetes.io/serial",  # the native namespace
        "requests.example.com/serial",  # looks like a quota name
        "Example.com/serial",  # domain must be lower case
        "example.com/-serial",  # name must start alphanumeric
        "example.com/" + "s" * 64,  # name longer than 63
        "example.com/a/b",
    ],
)
async def test_bad_resource_name_is_refused(kubelet: EmbeddedKubelet, name: str) -> None:
    """Names the kubelet's IsExtendedResourceName rejects are refused with its message."""
    with pytest.raises(RegistrationError, match="is invalid") as caught:
        await register(
            kubelet.socket, endpoint="x.sock", resource_name=name, options=PluginOptions()
        )
    assert f'the ResourceName "{name}" is invalid' in str(caught.value)
    assert isinstance(caught.value.__cause__, grpc.aio.AioRpcError)
    assert caught.value.__cause__.code() == grpc.StatusCode.UNKNOWN


async def test_register_fails_when_the_plugin_socket_does_not_answer(base: Path) -> None:
    """The kubelet dials back before answering; no plugin server means a refused Register."""
    async with EmbeddedKubelet(base / "dp", dial_timeout=0.2) as kubelet:
        with pytest.raises(RegistrationError, match="failed to dial device plugin"):
            await register(
                kubelet.socket,
                endpoint="nobody.sock",
                resource_name=SERIAL,
                options=PluginOptions(),
            )
        assert SERIAL not in kubelet.resources


async def test_options_come_from_get_device_plugin_options(kubelet: EmbeddedKubelet) -> None:
    """The kubelet keeps what GetDevicePluginOptions says, not the Register request's options."""
    plugin = FakePlugin(three_devices(), pre_start_required=True)
    claimed = PluginOptions(get_preferred_allocation_available=True)
    async with registered(kubelet, plugin, options=claimed):
        options = kubelet.resources[SERIAL].options
        assert options == PluginOptions(pre_start_required=True)


async def test_start_removes_sockets_but_keeps_regular_files(base: Path) -> None:
    """Starting deletes stale unix sockets in the directory; the checkpoint and files stay."""
    plugin_dir = base / "dp"
    plugin_dir.mkdir()
    (plugin_dir / "kubelet_internal_checkpoint").write_text("{}")
    (plugin_dir / "notes.txt").write_text("keep me")
    stale = socketlib.socket(socketlib.AF_UNIX)
    stale.bind(str(plugin_dir / "old-plugin.sock"))
    stale.close()
    async with EmbeddedKubelet(plugin_dir) as kubelet:
        names = sorted(p.name for p in plugin_dir.iterdir())
        assert names == ["kubelet.sock", "kubelet_internal_checkpoint", "notes.txt"]
        assert "old-plugin.sock" in kubelet.events[0].detail
    assert not (plugin_dir / "kubelet.sock").exists()


async def test_restart_deletes_plugin_socket_and_zeroes_capacity(kubelet: EmbeddedKubelet) -> None:
    """After a restart the plugin's socket is gone and capacity reads 0 until it registers."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        await kubelet.restart()
        assert not (kubelet.plugin_dir / "serial.sock").exists()
        snap = kubelet.resources[SERIAL]
        assert (snap.capacity, snap.allocatable, snap.connected) == (0, 0, False)
    # The plugin comes back on a new socket and registers again.
    async with registered(kubelet, plugin, endpoint="serial-2.sock"):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        assert kubelet.resources[SERIAL].registrations == 2


async def test_stream_end_makes_everything_unallocatable(kubelet: EmbeddedKubelet) -> None:
    """When ListAndWatch ends, allocatable drops to 0 at once; capacity stays."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        plugin.end()
        await kubelet.wait_until(lambda k: not k.resources[SERIAL].connected)
        snap = kubelet.resources[SERIAL]
        assert (snap.capacity, snap.allocatable) == (3, 0)
        assert kubelet.events[-1].kind == EventKind.STREAM_ENDED
        # The kubelet never reopens the stream.
        assert plugin.streams_opened == 1


async def test_resource_is_forgotten_after_the_grace_period(base: Path) -> None:
    """A disconnected resource disappears once the grace period passes."""
    async with EmbeddedKubelet(base / "dp", endpoint_grace=0.05) as kubelet:
        plugin = FakePlugin(three_devices())
        async with registered(kubelet, plugin):
            await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
            plugin.end()
            await kubelet.wait_until(lambda k: SERIAL not in k.resources)
        assert kubelet.events[-1].kind == EventKind.EXPIRED


async def test_new_registration_takes_over_and_leaves_the_old_stream_open(
    kubelet: EmbeddedKubelet,
) -> None:
    """A second Register of a resource takes over Allocate; the old stream stays open (1.32)."""
    first = FakePlugin(three_devices())
    second = FakePlugin([device("n1")])
    async with registered(kubelet, first, endpoint="a.sock"):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        async with registered(kubelet, second, endpoint="b.sock"):
            await kubelet.wait_until(has(SERIAL, capacity=1, allocatable=1))
            await kubelet.wait_until(lambda k: k.resources[SERIAL].streams == 2)
            snap = kubelet.resources[SERIAL]
            assert (snap.endpoint, snap.registrations, snap.connected) == ("b.sock", 2, True)
            assert kubelet.problems() == [f"{SERIAL}: 2 ListAndWatch streams open"]
            assert not first.stream_cancelled.is_set()


async def test_old_stream_ending_disconnects_the_newer_client(kubelet: EmbeddedKubelet) -> None:
    """When the old endpoint's stream ends, the client filed under the name (the new one) goes."""
    first = FakePlugin(three_devices())
    second = FakePlugin([device("n1")])
    async with registered(kubelet, first, endpoint="a.sock"):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        async with registered(kubelet, second, endpoint="b.sock"):
            await kubelet.wait_until(has(SERIAL, capacity=1, allocatable=1))
            await kubelet.wait_until(lambda k: k.resources[SERIAL].streams == 2)
            first.end()
            async with asyncio.timeout(10):  # a bound, not a wait: it fails instead of hanging
                await second.stream_cancelled.wait()
            await kubelet.wait_until(lambda k: not k.resources[SERIAL].connected)
            snap = kubelet.resources[SERIAL]
            assert (snap.capacity, snap.allocatable, snap.streams) == (1, 0, 0)
            ended = [e for e in kubelet.events if e.kind is EventKind.STREAM_ENDED]
            assert "a.sock ended" in ended[-1].detail
            assert "disconnected the newer b.sock" in ended[-1].detail


async def test_allocate_without_preferred_allocation(kubelet: EmbeddedKubelet) -> None:
    """Allocate gets one container request of healthy IDs; no GetPreferredAllocation call."""
    plugin = FakePlugin([device("d1"), device("d2", "Unhealthy"), device("d3")])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        response = await kubelet.allocate(SERIAL, 2, pod="p1")
    assert plugin.preferred_requests == []
    assert len(plugin.allocate_requests) == 1
    (request,) = plugin.allocate_requests[0].container_requests
    assert sorted(request.devices_ids) == ["d1", "d3"]
    assert response.container_responses[0].envs["IDS"] == ",".join(request.devices_ids)


async def test_allocate_honours_preferred_allocation(kubelet: EmbeddedKubelet) -> None:
    """The plugin's preferred IDs are used when it advertises GetPreferredAllocation."""
    devices = [device(f"d{i}") for i in range(1, 5)]
    plugin = FakePlugin(devices, get_preferred_allocation_available=True, preferred=["d4", "d2"])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=4, allocatable=4))
        await kubelet.allocate(SERIAL, 2, pod="p1")
    (preferred,) = plugin.preferred_requests[0].container_requests
    assert sorted(preferred.available_deviceIDs) == ["d1", "d2", "d3", "d4"]
    assert list(preferred.must_include_deviceIDs) == []
    assert preferred.allocation_size == 2
    assert list(plugin.allocate_requests[0].container_requests[0].devices_ids) == ["d4", "d2"]


async def test_invalid_preferred_ids_fall_back_to_available(kubelet: EmbeddedKubelet) -> None:
    """Preferred IDs that are unknown or taken are ignored and the rest is filled up."""
    devices = [device("d1"), device("d2"), device("d3")]
    plugin = FakePlugin(devices, get_preferred_allocation_available=True, preferred=["zz", "d1"])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=3))
        await kubelet.allocate(SERIAL, 1, pod="p1")
        await kubelet.allocate(SERIAL, 2, pod="p2")
    first, second = (list(r.container_requests[0].devices_ids) for r in plugin.allocate_requests)
    assert first == ["d1"]
    assert sorted(second) == ["d2", "d3"]


async def test_pre_start_container_is_called_when_required(kubelet: EmbeddedKubelet) -> None:
    """PreStartContainer gets the allocated IDs when the plugin requires it."""
    plugin = FakePlugin(three_devices(), pre_start_required=True)
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        await kubelet.allocate(SERIAL, 1, pod="p1")
    assert plugin.pre_start_requests == [
        list(plugin.allocate_requests[0].container_requests[0].devices_ids)
    ]


async def test_pre_start_is_skipped_when_not_required(kubelet: EmbeddedKubelet) -> None:
    """No PreStartContainer call for a plugin that did not ask for it."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        await kubelet.allocate(SERIAL, 1, pod="p1")
    assert plugin.pre_start_requests == []


async def test_not_enough_devices_is_an_admission_error(kubelet: EmbeddedKubelet) -> None:
    """Asking for more healthy free devices than exist fails like the kubelet's admission."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        await kubelet.allocate(SERIAL, 1, pod="p1")
        with pytest.raises(AllocationError, match="Requested: 2, Available: 1") as caught:
            await kubelet.allocate(SERIAL, 2, pod="p2")
    assert caught.value.reason == "UnexpectedAdmissionError"
    assert len(plugin.allocate_requests) == 1
    # Other events (the stream ending as the plugin stops) may follow: find ours.
    failed = [e for e in kubelet.events if e.kind is EventKind.ALLOCATION_FAILED]
    assert [e.resource for e in failed] == [SERIAL]
    assert "default/p2/main" in failed[0].detail


async def test_unregistered_resource_cannot_be_allocated(kubelet: EmbeddedKubelet) -> None:
    """Allocating a resource nobody registered names it in the error."""
    with pytest.raises(
        AllocationError, match=r"cannot allocate unregistered device example\.com/x"
    ):
        await kubelet.allocate("example.com/x", 1, pod="p1")


async def test_plugin_allocate_error_fails_admission(kubelet: EmbeddedKubelet) -> None:
    """An Allocate error from the plugin becomes an UnexpectedAdmissionError with its text."""
    plugin = FakePlugin(three_devices(), allocate_error="init hook failed")
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        with pytest.raises(AllocationError, match="init hook failed") as caught:
            await kubelet.allocate(SERIAL, 1, pod="p1")
        assert str(caught.value).startswith("Allocate failed due to rpc error: code = Invalid")
        assert kubelet.pod_devices() == ()


async def test_pod_resources_list_shows_allocations(kubelet: EmbeddedKubelet) -> None:
    """PodResources List over the real socket reports each container's devices until release."""
    assert kubelet.pod_resources_socket is not None
    plugin = FakePlugin([device("d1", numa=[0]), device("d2", numa=[0, 1]), device("d3")])
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=3))
        await kubelet.allocate(SERIAL, 2, pod="p1", container="c1", namespace="ns")
        await kubelet.allocate(SERIAL, 1, pod="p2")
        listed = await list_pod_devices(kubelet.pod_resources_socket)
        assert listed == kubelet.pod_devices()
        by_pod = {(p.namespace, p.pod, p.container): p for p in listed}
        assert set(by_pod) == {("ns", "p1", "c1"), ("default", "p2", "main")}
        assert len(by_pod["ns", "p1", "c1"].device_ids) == 2
        assert all(p.resource_name == SERIAL for p in listed)
        assert kubelet.release("ns", "p1") == 2
        listed = await list_pod_devices(kubelet.pod_resources_socket)
        assert [p.pod for p in listed] == ["p2"]
        assert kubelet.resources[SERIAL].allocated == frozenset(listed[0].device_ids)


async def test_repeated_admission_replays_the_recorded_answer(kubelet: EmbeddedKubelet) -> None:
    """A container that already holds devices gets the same answer without a new Allocate."""
    plugin = FakePlugin(three_devices())
    async with registered(kubelet, plugin):
        await kubelet.wait_until(has(SERIAL, capacity=3, allocatable=2))
        first = await kubelet.allocate(SERIAL, 1, pod="p1")
        again = await kubelet.allocate(SERIAL, 1, pod="p1")
    assert again == first
    assert len(plugin.allocate_requests) == 1
    assert kubelet.pod_devices() == (
        PodDevices(
            "default",
            "p1",
            "main",
            SERIAL,
            tuple(first.container_responses[0].envs["IDS"].split(",")),
        ),
    )


async def test_wait_until_times_out_with_the_state(kubelet: EmbeddedKubelet) -> None:
    """A wait that cannot be met raises TimeoutError that shows the current state."""
    with pytest.raises(TimeoutError, match="resources: none"):
        await kubelet.wait_until(lambda k: SERIAL in k.resources, timeout=0.05)


async def test_socket_path_too_long_is_a_clear_error(base: Path) -> None:
    """A plugin directory too deep for a unix socket address fails with the limit named."""
    deep = base / ("d" * 100)
    with pytest.raises(KubeletError, match="limit is 107 bytes"):
        await EmbeddedKubelet(deep).start()
