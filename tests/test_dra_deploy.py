"""The kustomize `dra` component: rendered by kubectl, applied to a real API server, and
its RBAC and admission policy exercised with a real pod-bound service account token."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError
from ruamel.yaml import YAML

from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apiclaims import ApiClaimSource
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.claims import ClaimError, ClaimRef
from genericdp.kubeletplugin.slices import pool_slices
from tests.apiserver import ApiServer, kube_bin_dir
from tests.dra_apislices import api_slices, running

ROOT = Path(__file__).resolve().parent.parent
KUSTOMIZE = ROOT / "deploy" / "kustomize"
COMPONENT = KUSTOMIZE / "components" / "dra"
NODE = "node-rbac"
_namespaces = itertools.count()


def render(tmp_path: Path, namespace: str = "gdp-dra") -> list[dict[str, Any]]:
    bin_dir = kube_bin_dir()
    if bin_dir is None or not (bin_dir / "kubectl").exists():
        pytest.skip("needs kubectl for `kubectl kustomize` (KUBE_BIN_DIR)")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(KUSTOMIZE / "base", overlay)
    component = os.path.relpath(COMPONENT, overlay)
    (overlay / "kustomization.yaml").write_text(
        f"namespace: {namespace}\nresources: [{base}]\ncomponents: [{component}]\n"
    )
    done = subprocess.run(
        [str(bin_dir / "kubectl"), "kustomize", str(overlay)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in YAML(typ="safe", pure=True).load_all(done.stdout) if d]


def test_the_component_makes_the_daemonset_a_dra_driver(tmp_path: Path) -> None:
    objs = render(tmp_path)
    kinds = sorted(o["kind"] for o in objs)
    assert "DeviceClass" not in kinds  # the reconciler makes them
    assert {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy"} <= set(kinds)
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    container = pod["containers"][0]
    assert {"name": "GENERICDP_BACKEND", "value": "dra"} in container["env"]
    # A rolling update without a gap: the new pod serves beside the old one.
    uid = {"name": "GENERICDP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    assert uid in container["env"]
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins"} <= mounts
    # The last good config is kept for the DRA backend too.
    assert "/var/lib/genericdp" in mounts
    assert {"name": "GENERICDP_STATE_DIR", "value": "/var/lib/genericdp"} in container["env"]
    binding = named(objs, "ClusterRoleBinding", "genericdp-dra")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "genericdp", "namespace": "gdp-dra"}
    ]
    role = named(objs, "ClusterRole", "genericdp-dra")
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in role["rules"]} == {
        (("resourceslices",), ("get", "list", "watch", "create", "update", "delete")),
        (("resourceclaims",), ("get",)),
    }


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


def test_the_component_runs_the_deviceclass_reconciler(tmp_path: Path) -> None:
    """One replica of the image's `reconcile-classes`, on the DaemonSet's ConfigMap, with a
    service account of its own."""
    objs = render(tmp_path)
    deployment = named(objs, "Deployment", "genericdp-deviceclasses")
    assert deployment["spec"]["replicas"] == 1
    pod = deployment["spec"]["template"]["spec"]
    daemon = named(objs, "DaemonSet", "genericdp")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["reconcile-classes"]
    assert container["image"] == daemon["containers"][0]["image"]
    assert container["image"].startswith("ghcr.io/genericdp/genericdp:")
    assert pod["serviceAccountName"] == "genericdp-deviceclasses"
    config = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config == next(v for v in daemon["volumes"] if v["name"] == "config")


def _can(apiserver: ApiServer, user: str, *args: str) -> bool:
    bin_dir = kube_bin_dir()
    assert bin_dir is not None
    done = subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={apiserver.kubeconfig}", "auth", "can-i",
         f"--as={user}", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.stdout.strip() in ("yes", "no"), done.stderr
    return done.stdout.strip() == "yes"


def test_the_reconciler_may_write_deviceclasses_and_its_lease_and_nothing_else(
    tmp_path: Path, apiserver: ApiServer, namespace: str
) -> None:
    """Its RBAC on the real API server: classes written, slices only read, the Lease in its
    own namespace only, nothing else (secrets, nodes, the driver's slices)."""
    objs = render(tmp_path, namespace)
    ours = [o for o in objs if o["metadata"]["name"] == "genericdp-deviceclasses"]
    ours = [o for o in ours if o["kind"] != "Deployment"]
    apiserver.kubectl("create", "namespace", namespace)
    applied = json.dumps({"apiVersion": "v1", "kind": "List", "items": ours})
    apiserver.kubectl("apply", "--server-side", "-f", "-", input_text=applied)
    user = f"system:serviceaccount:{namespace}:genericdp-deviceclasses"
    try:
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert _can(apiserver, user, verb, "deviceclasses.resource.k8s.io")
        for verb in ("get", "list", "watch"):
            assert _can(apiserver, user, verb, "resourceslices.resource.k8s.io")
        for verb in ("create", "update", "delete"):
            assert not _can(apiserver, user, verb, "resourceslices.resource.k8s.io")
        for verb in ("get", "create", "update"):
            assert _can(apiserver, user, verb, "leases.coordination.k8s.io", "-n", namespace)
        assert not _can(apiserver, user, "get", "leases.coordination.k8s.io", "-n", "default")
        assert not _can(apiserver, user, "delete", "leases.coordination.k8s.io", "-n", namespace)
        assert not _can(apiserver, user, "get", "resourceclaims.resource.k8s.io", "-A")
        assert not _can(apiserver, user, "get", "secrets", "-n", namespace)
        assert not _can(apiserver, user, "list", "nodes")
    finally:
        apiserver.kubectl("delete", "--wait=false", "-f", "-", input_text=applied)


def _kubeconfig(path: Path, apiserver: ApiServer, token: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: t\n  cluster:\n    server: {apiserver.url}\n"
        f"    certificate-authority: {apiserver.pki / 'ca.crt'}\n"
        f"users:\n- name: sa\n  user:\n    token: {token}\n"
        "contexts:\n- name: t\n  context: {cluster: t, user: sa}\ncurrent-context: t\n"
    )
    return path


@pytest.fixture
def namespace() -> str:
    """Namespaces are never deleted here (no controller manager): a new one per test."""
    return f"gdp-dra-{next(_namespaces)}-{int(time.time()) % 100000}"


@pytest.fixture
async def driver_client(
    tmp_path: Path, apiserver: ApiServer, namespace: str
) -> AsyncIterator[kubeapi.AsyncClient]:
    """The component applied; a client holding the token of a genericdp pod on NODE."""
    objs = render(tmp_path, namespace)
    apiserver.kubectl("create", "namespace", namespace)
    applied = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    apiserver.kubectl("apply", "--server-side", "-f", "-", input_text=applied)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
    apiserver.kubectl("create", "-f", "-", input_text=json.dumps(node))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "genericdp-x", "namespace": namespace},
        "spec": {
            "nodeName": NODE,
            "serviceAccountName": "genericdp",
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }
    apiserver.kubectl("create", "-f", "-", input_text=json.dumps(pod))
    token = apiserver.kubectl(
        "create", "token", "genericdp", "-n", namespace,
        "--bound-object-kind", "Pod", "--bound-object-name", "genericdp-x",
    ).strip()  # fmt: skip
    client = kubeapi.connect(_kubeconfig(tmp_path / "sa.kubeconfig", apiserver, token))
    try:
        yield client
    finally:
        await client.close()
        applied = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        apiserver.kubectl("delete", "--wait=false", "-f", "-", input_text=applied)
        apiserver.kubectl("delete", "node", NODE, "--wait=false")
        apiserver.kubectl("delete", "resourceslices", f"--field-selector=spec.nodeName={NODE}")


def _unit(uid: str) -> Unit:
    return Unit(uid, (DeviceNode(f"/dev/{uid}", f"/dev/{uid}"),))


async def test_the_driver_writes_its_nodes_slices_and_no_others(
    driver_client: kubeapi.AsyncClient, apiserver: ApiServer
) -> None:
    store = api_slices(driver_client, NODE)
    async with running(store) as publisher:
        await publisher.publish("example.com/serial", [_unit("a")], set())
        assert await publisher.flush(timeout=10)
        assert store.writes == 1

    foreign = pool_slices(
        {"example.com/x": []}, node="another-node", driver="genericdp.io", generation=1
    )
    obj = next(iter(foreign.values()))
    # The policy is loaded a moment after it is created: until then a write may pass.
    deadline = time.monotonic() + 30
    while (refused := await _refusal(driver_client, obj)) is None:
        apiserver.kubectl("delete", "resourceslices", "--field-selector=spec.nodeName=another-node")
        assert time.monotonic() < deadline, "the policy never denied another node's slice"
        await asyncio.sleep(0.2)
    assert refused.code in (403, 422), refused.reason
    assert "may not write the ResourceSlices of node another-node" in refused.reason


async def _refusal(
    client: kubeapi.AsyncClient, obj: dict[str, Any]
) -> kubeapi.ApiRequestError | None:
    try:
        await ApiSlices(client, node="another-node").create(obj)
    except kubeapi.ApiRequestError as err:
        return err
    return None


async def test_the_driver_may_get_claims_but_not_list_them(
    driver_client: kubeapi.AsyncClient, apiserver: ApiServer, namespace: str
) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
    }
    made = apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(claim))
    created = json.loads(made)
    source = ApiClaimSource(driver_client, node=NODE)
    with pytest.raises(ClaimError, match="not allocated"):
        await source.allocation(ClaimRef(namespace, "c1", created["metadata"]["uid"]))
    with pytest.raises(ApiError) as denied:
        async for _ in driver_client.list(kubeapi.RESOURCE_CLAIM, namespace=namespace):
            pass
    assert denied.value.status.code == 403
