"""Sharing under DRA as the real kube-scheduler (1.36) allocates it: pods with ``limits``.

A node object (no kubelet: a bound pod is as far as the scheduler goes),
the slices the publisher writes for one unit of ``count: 3`` and one of
``count: unbounded``, the DeviceClasses ``genericdp deviceclasses``
makes, and pods asking for ``limits: {<resource>: 1}`` through the class's
``extendedResourceName``: as many are bound as the device plugin's replica
IDs would admit. The server is this test's own, so its scheduler binds no
other test's pods.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from genericdp.deviceclasses import device_class
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
from genericdp.kubeletplugin.slices import DeviceOptions, devices, pool_slices
from tests.apiserver import ApiServer, missing, start

NODE = "node-shared"
KVM, TUN = "example.com/kvm", "example.com/tun"
WAIT = "--timeout=90s"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ApiServer]:
    reason = missing()
    if reason is not None:
        pytest.skip(f"needs a real kube-apiserver: {reason}")
    server = start()
    scheduler = server.bin_dir / "kube-scheduler"
    if not os.access(scheduler, os.X_OK):
        server.stop()
        pytest.skip(f"{scheduler} is not an executable")
    log = (tmp_path / "kube-scheduler.log").open("wb")
    process = subprocess.Popen(
        [
            str(scheduler),
            f"--kubeconfig={server.kubeconfig}",
            f"--authentication-kubeconfig={server.kubeconfig}",
            f"--authorization-kubeconfig={server.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        server.stop()


def apply(server: ApiServer, obj: dict[str, Any]) -> None:
    server.kubectl("apply", "-f", "-", input_text=json.dumps(obj))


def ready_node(server: ApiServer) -> None:
    """A Node that fits pods: allocatable, Ready, without the not-ready taint it is made with."""
    apply(server, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    now = "2026-01-01T00:00:00Z"
    ready = {"type": "Ready", "status": "True", "reason": "Test", "message": "test"}
    status = {
        "capacity": {"pods": "110", "cpu": "8", "memory": "8Gi"},
        "allocatable": {"pods": "110", "cpu": "8", "memory": "8Gi"},
        "conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }
    patch = json.dumps({"status": status})
    server.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge", "-p", patch)
    server.kubectl("patch", "node", NODE, "--type=merge", "-p", '{"spec": {"taints": null}}')


def pod(name: str, resource: str) -> dict[str, Any]:
    container = {"name": "c", "image": "unused", "resources": {"limits": {resource: "1"}}}
    spec = {"automountServiceAccountToken": False, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_pods_with_limits_share_a_device_as_many_as_count_allows(cluster: ApiServer) -> None:
    """count: 3 binds three pods of one unit and leaves the fourth unschedulable;
    count: unbounded binds five; each pod's claim consumes one share."""
    ready_node(cluster)
    cluster.kubectl("create", "serviceaccount", "default")
    shared = {
        KVM: devices(KVM, [Unit("kvm", (DeviceNode("/dev/kvm", "/dev/kvm"),))], set(),
                     driver=DEFAULT_DRIVER, options=DeviceOptions(shares=3)),
        TUN: devices(TUN, [Unit("tun", (DeviceNode("/dev/net/tun", "/dev/net/tun"),))], set(),
                     driver=DEFAULT_DRIVER, options=DeviceOptions(shares=None)),
    }  # fmt: skip
    for obj in pool_slices(shared, node=NODE, driver=DEFAULT_DRIVER, generation=1).values():
        cluster.kubectl("create", "-f", "-", input_text=json.dumps(obj))  # generateName
    for resource in (KVM, TUN):
        apply(cluster, device_class(resource, DEFAULT_DRIVER))
    kvm = [f"kvm-{i}" for i in range(4)]
    tun = [f"tun-{i}" for i in range(5)]
    for name in kvm:
        apply(cluster, pod(name, KVM))
    for name in tun:
        apply(cluster, pod(name, TUN))
    bound = f"--for=jsonpath={{.spec.nodeName}}={NODE}"
    for name in (*kvm[:3], *tun):
        cluster.kubectl("wait", bound, f"pod/{name}", WAIT)
    cluster.kubectl("wait", "--for=condition=PodScheduled=false", f"pod/{kvm[3]}", WAIT)
    message = cluster.kubectl(
        "get", "pod", kvm[3], "-o", "jsonpath={.status.conditions[0].message}"
    )
    assert "cannot allocate all claims" in message
    claims = json.loads(cluster.kubectl("get", "resourceclaims", "-o", "json"))["items"]
    consumed = [
        result.get("consumedCapacity")
        for claim in claims
        for result in claim.get("status", {})
        .get("allocation", {})
        .get("devices", {})
        .get("results", ())
        if result["device"].startswith("kvm-")
    ]
    assert consumed == [{"shares": "1"}] * 3
