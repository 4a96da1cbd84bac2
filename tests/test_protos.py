"""The checked-in kubelet API stubs match their protos and the kubelet's wire contract."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

from genericdp.grpcservices import Stub, service_handler
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.api import podresources_pb2 as pr
from tools.protos import KUBELET_API as API_DIR
from tools.protos import generate

GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")


def test_checked_in_stubs_are_exactly_what_protoc_generates(base: Path) -> None:
    """Regenerating the stubs changes no byte: nobody edited them or forgot `make protos`."""
    fresh = {path.name: path for path in generate(API_DIR, base)}
    checked_in = {p.name: p for p in API_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}
    assert sorted(fresh) == sorted(checked_in)
    drifted = [
        name for name, path in fresh.items() if path.read_bytes() != checked_in[name].read_bytes()
    ]
    assert drifted == [], f"stale stubs, run `make protos`: {drifted}"


def method_paths(descriptor: FileDescriptor) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in descriptor.services_by_name.values()
        for method in service.methods
    }


def test_method_paths_are_the_kubelets() -> None:
    """The gRPC method paths are the ones the kubelet dials and serves."""
    assert method_paths(pb.DESCRIPTOR) == {
        "/v1beta1.Registration/Register",
        "/v1beta1.DevicePlugin/GetDevicePluginOptions",
        "/v1beta1.DevicePlugin/ListAndWatch",
        "/v1beta1.DevicePlugin/GetPreferredAllocation",
        "/v1beta1.DevicePlugin/Allocate",
        "/v1beta1.DevicePlugin/PreStartContainer",
    }
    assert method_paths(pr.DESCRIPTOR) == {
        "/v1.PodResourcesLister/List",
        "/v1.PodResourcesLister/GetAllocatableResources",
        "/v1.PodResourcesLister/Get",
    }


class _Channel:
    """Records the multicallables a stub asks for: path -> kind."""

    def __init__(self) -> None:
        self.dialled: dict[str, str] = {}

    def __getattr__(self, kind: str) -> Callable[..., None]:
        def multicallable(path: str, **_serializers: object) -> None:
            self.dialled[path] = kind

        return multicallable


def test_stubs_and_handlers_use_the_same_paths() -> None:
    """The clients and servers built from the descriptors dial and serve its paths."""
    kinds: dict[str, str] = {}
    for descriptor in (pb.DESCRIPTOR, pr.DESCRIPTOR):
        paths = method_paths(descriptor)
        for service in descriptor.services_by_name.values():
            channel = _Channel()
            Stub(channel, service)  # type: ignore[arg-type]
            servicer = SimpleNamespace(**{m.name: print for m in service.methods})
            handler = service_handler(service, servicer)
            served = {p for p in paths if handler.service(SimpleNamespace(method=p))}  # type: ignore[arg-type]
            assert (
                set(channel.dialled)
                == served
                == {p for p in paths if p.startswith(f"/{service.full_name}/")}
            )
            kinds |= channel.dialled
    assert kinds["/v1beta1.DevicePlugin/ListAndWatch"] == "unary_stream"
    assert kinds["/v1beta1.DevicePlugin/Allocate"] == "unary_unary"


def test_list_and_watch_streams_and_nothing_else_does() -> None:
    """Only ListAndWatch is server-streaming; a unary one would never see updates."""
    streaming = {
        method.name
        for service in pb.DESCRIPTOR.services_by_name.values()
        for method in service.methods
        if method.server_streaming or method.client_streaming
    }
    assert streaming == {"ListAndWatch"}
    method = pb.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert method.server_streaming
    assert not method.client_streaming


@pytest.mark.parametrize(
    ("message", "field", "number"),
    [
        (pb.RegisterRequest, "version", 1),
        (pb.RegisterRequest, "endpoint", 2),
        (pb.RegisterRequest, "resource_name", 3),
        (pb.RegisterRequest, "options", 4),
        (pb.DevicePluginOptions, "pre_start_required", 1),
        (pb.DevicePluginOptions, "get_preferred_allocation_available", 2),
        (pb.Device, "ID", 1),
        (pb.Device, "health", 2),
        (pb.Device, "topology", 3),
        (pb.ContainerPreferredAllocationRequest, "available_deviceIDs", 1),
        (pb.ContainerPreferredAllocationRequest, "must_include_deviceIDs", 2),
        (pb.ContainerPreferredAllocationRequest, "allocation_size", 3),
        (pb.ContainerAllocateResponse, "envs", 1),
        (pb.ContainerAllocateResponse, "mounts", 2),
        (pb.ContainerAllocateResponse, "devices", 3),
        (pb.ContainerAllocateResponse, "annotations", 4),
        (pb.ContainerAllocateResponse, "cdi_devices", 5),
        (pb.DeviceSpec, "permissions", 3),
        (pb.Mount, "read_only", 3),
        (pr.PodResources, "containers", 3),
        (pr.ContainerResources, "devices", 2),
        (pr.ContainerDevices, "device_ids", 2),
        (pr.ContainerDevices, "topology", 3),
    ],
)
def test_field_numbers_match_upstream(message: type[Message], field: str, number: int) -> None:
    """Field numbers are the wire format; a renumbered field silently breaks the kubelet."""
    assert message.DESCRIPTOR.fields_by_name[field].number == number


def test_packages_are_the_kubelets() -> None:
    """Proto packages name the method paths: v1beta1 for plugins, v1 for PodResources."""
    assert (pb.DESCRIPTOR.package, pr.DESCRIPTOR.package) == ("v1beta1", "v1")
