"""The checked-in DRA API stubs match their protos and the kubelet's wire contract."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

from genericdp.kubeletplugin.api import dra_v1_pb2, dra_v1beta1_pb2, drahealth_v1alpha1_pb2
from genericdp.kubeletplugin.api import pluginregistration_pb2 as reg
from tools.protos import KUBELETPLUGIN_API as API_DIR
from tools.protos import generate

GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi")


def test_checked_in_stubs_are_exactly_what_protoc_generates(base: Path) -> None:
    """Regenerating the stubs changes no byte: nobody edited them or forgot `./dev protos`."""
    fresh = {path.name: path for path in generate(API_DIR, base)}
    checked_in = {p.name: p for p in API_DIR.iterdir() if p.name.endswith(GENERATED_SUFFIXES)}
    assert sorted(fresh) == sorted(checked_in)
    drifted = [
        name for name, path in fresh.items() if path.read_bytes() != checked_in[name].read_bytes()
    ]
    assert drifted == [], f"stale stubs, run `./dev protos`: {drifted}"


def method_paths(descriptor: FileDescriptor) -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for service in descriptor.services_by_name.values()
        for method in service.methods
    }


def test_method_paths_are_the_kubelets() -> None:
    """The paths the kubelet's plugin watcher, DRA manager and health stream call."""
    assert method_paths(reg.DESCRIPTOR) == {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }
    for module, version in ((dra_v1_pb2, "v1"), (dra_v1beta1_pb2, "v1beta1")):
        assert method_paths(module.DESCRIPTOR) == {
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodePrepareResources",
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodeUnprepareResources",
        }
    assert method_paths(drahealth_v1alpha1_pb2.DESCRIPTOR) == {
        "/v1alpha1.DRAResourceHealth/NodeWatchResources"
    }


def test_only_the_health_watch_streams() -> None:
    method = drahealth_v1alpha1_pb2.DESCRIPTOR.services_by_name[
        "DRAResourceHealth"
    ].methods_by_name["NodeWatchResources"]
    assert method.server_streaming
    assert not method.client_streaming
    for module in (reg, dra_v1_pb2, dra_v1beta1_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            assert not any(m.server_streaming or m.client_streaming for m in service.methods)


@pytest.mark.parametrize(
    ("message", "field", "number"),
    [
        (reg.PluginInfo, "type", 1),
        (reg.PluginInfo, "name", 2),
        (reg.PluginInfo, "endpoint", 3),
        (reg.PluginInfo, "supported_versions", 4),
        (reg.RegistrationStatus, "plugin_registered", 1),
        (reg.RegistrationStatus, "error", 2),
        (dra_v1_pb2.NodePrepareResourcesRequest, "claims", 1),
        (dra_v1_pb2.NodePrepareResourcesResponse, "claims", 1),
        (dra_v1_pb2.NodePrepareResourceResponse, "devices", 1),
        (dra_v1_pb2.NodePrepareResourceResponse, "error", 2),
        (dra_v1_pb2.Device, "request_names", 1),
        (dra_v1_pb2.Device, "pool_name", 2),
        (dra_v1_pb2.Device, "device_name", 3),
        (dra_v1_pb2.Device, "cdi_device_ids", 4),
        (dra_v1_pb2.Device, "share_id", 5),
        (dra_v1beta1_pb2.Device, "cdi_device_ids", 4),
        (dra_v1_pb2.NodeUnprepareResourceResponse, "error", 1),
        (dra_v1_pb2.Claim, "namespace", 1),
        (dra_v1_pb2.Claim, "uid", 2),
        (dra_v1_pb2.Claim, "name", 3),
        (drahealth_v1alpha1_pb2.DeviceIdentifier, "pool_name", 1),
        (drahealth_v1alpha1_pb2.DeviceIdentifier, "device_name", 2),
        (drahealth_v1alpha1_pb2.DeviceHealth, "device", 1),
        (drahealth_v1alpha1_pb2.DeviceHealth, "health", 2),
        (drahealth_v1alpha1_pb2.DeviceHealth, "last_updated_time", 3),
        (drahealth_v1alpha1_pb2.DeviceHealth, "health_check_timeout_seconds", 4),
        (drahealth_v1alpha1_pb2.DeviceHealth, "message", 5),
    ],
)
def test_field_numbers_match_upstream(message: type[Message], field: str, number: int) -> None:
    """Field numbers are the wire format; a renumbered field silently breaks the kubelet."""
    assert message.DESCRIPTOR.fields_by_name[field].number == number


def test_health_values_match_upstream() -> None:
    status = drahealth_v1alpha1_pb2.HealthStatus
    assert (status.Value("UNKNOWN"), status.Value("HEALTHY"), status.Value("UNHEALTHY")) == (
        0,
        1,
        2,
    )
