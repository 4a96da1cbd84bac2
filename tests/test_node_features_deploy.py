"""Publishing node labels in the chart and the kustomize component: the env the daemon
reads, the feature directory's mount, and RBAC for NodeFeatures only when enabled; the
chart's Role is the component's, and it lets the pod's account write NodeFeatures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.apiserver import ApiServer
from tests.test_chart import CHART, ROOT, helm, helm_template
from tests.test_nodefeature import install_crd

__all__ = ["helm"]  # the fixture, used by name

COMPONENT = ROOT / "deploy" / "kustomize" / "components" / "node-features"


def _pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = next(o for o in objs if o["kind"] == "DaemonSet")["spec"]["template"]
    spec: dict[str, Any] = pod["spec"]
    return spec


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}


def test_off_by_default_nothing_is_added(helm: Path) -> None:
    """The defaults publish nothing: no variable, no mount, no Role."""
    objs = helm_template(helm, CHART)
    assert "Role" not in [o["kind"] for o in objs]
    pod = _pod(objs)
    assert not [name for name in _env(pod) if name.startswith("GENERICDP_NODE_FEATURES")]
    assert "features-d" not in [v["name"] for v in pod["volumes"]]


def test_nodefeature_renders_the_components_role_and_the_owner(helm: Path) -> None:
    """publish=nodefeature: the pod's namespace, the DaemonSet as owner, a token, and the
    kustomize component's Role (NodeFeatures in the namespace, the DaemonSet by name)."""
    objs = helm_template(
        helm, CHART, "--set", "nodeFeatures.publish=nodefeature", "--set", "rbac.nodes=false"
    )
    pod = _pod(objs)
    env = _env(pod)
    assert env["GENERICDP_NODE_FEATURES"] == "nodefeature"
    assert env["GENERICDP_NODE_FEATURES_NAMESPACE"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert env["GENERICDP_NODE_FEATURES_OWNER"] == "gdp-genericdp"
    assert pod["automountServiceAccountToken"] is True
    role = next(o for o in objs if o["kind"] == "Role")
    assert role["metadata"]["namespace"] == "devices"
    shipped = next(
        d for d in YAML(typ="safe", pure=True).load_all((COMPONENT / "rbac.yaml").read_text()) if d
    )
    rules = [dict(r) for r in shipped["rules"]]
    rules[1]["resourceNames"] = ["gdp-genericdp"]  # the release's DaemonSet
    # The chart's NodeFeature is named after its DaemonSet, so an upgrade deletes
    # the object of the old name; the component's name never changes.
    rules[0]["verbs"] = [*rules[0]["verbs"], "delete"]
    assert role["rules"] == rules
    binding = next(o for o in objs if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gdp-genericdp", "namespace": "devices"}
    ]


def test_file_mounts_the_feature_directory_at_its_host_path(helm: Path) -> None:
    """publish=file: the file in featuresDir, that directory mounted from the host; no Role."""
    objs = helm_template(
        helm, CHART, "--set", "nodeFeatures.publish=file", "--set", "nodeFeatures.featuresDir=/x/d/"
    )
    assert "Role" not in [o["kind"] for o in objs]
    pod = _pod(objs)
    assert _env(pod)["GENERICDP_NODE_FEATURES_FILE"] == "/x/d/genericdp"
    volume = next(v for v in pod["volumes"] if v["name"] == "features-d")
    assert volume["hostPath"] == {"path": "/x/d", "type": "DirectoryOrCreate"}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "features-d")
    assert mount == {"name": "features-d", "mountPath": "/x/d"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_the_component_adds_the_variables_and_the_role(tmp_path: Path) -> None:
    """The kustomize component over the base: the variables, a token, the Role and binding."""
    base = ROOT / "deploy" / "kustomize" / "base"
    (tmp_path / "kustomization.yaml").write_text(
        f"namespace: kube-system\nresources: [{os.path.relpath(base, tmp_path)}]\n"
        f"components: [{os.path.relpath(COMPONENT, tmp_path)}]\n"
    )
    out = subprocess.run(
        ["kubectl", "kustomize", str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in YAML(typ="safe", pure=True).load_all(out) if d]
    pod = _pod(docs)
    env = _env(pod)
    assert env["GENERICDP_NODE_FEATURES"] == "nodefeature"
    assert env["GENERICDP_NODE_FEATURES_OWNER"] == "genericdp"
    assert pod["automountServiceAccountToken"] is True
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == "kube-system"
    assert binding["subjects"][0]["namespace"] == "kube-system"


def test_the_role_lets_the_pods_account_write_node_features_and_nothing_more(
    apiserver: ApiServer,
) -> None:
    """The component's Role on the real API server: the account may apply NodeFeatures in
    its namespace and read its own DaemonSet; not another namespace, not another DaemonSet."""
    namespace = "nf-rbac"
    install_crd(apiserver)  # kubectl auth can-i names resources the server serves
    apiserver.kubectl(
        "apply",
        "-f",
        "-",
        input_text=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        ),
    )
    rbac = (
        (COMPONENT / "rbac.yaml")
        .read_text()
        .replace("namespace: default", f"namespace: {namespace}")
    )
    apiserver.kubectl("apply", "-n", namespace, "-f", "-", input_text=rbac)
    who = f"--as=system:serviceaccount:{namespace}:genericdp"

    def can(*args: str) -> bool:
        done = subprocess.run(
            [
                str(apiserver.bin_dir / "kubectl"),
                f"--kubeconfig={apiserver.kubeconfig}",
                "auth",
                "can-i",
                who,
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.stdout.strip() in ("yes", "no"), done.stderr
        return done.stdout.strip() == "yes"

    for verb in ("create", "get", "update", "patch"):
        assert can(verb, "nodefeatures.nfd.k8s-sigs.io", "-n", namespace), verb
    assert not can("delete", "nodefeatures.nfd.k8s-sigs.io", "-n", namespace)
    assert not can("patch", "nodefeatures.nfd.k8s-sigs.io", "-n", "default")
    assert can("get", "daemonsets.apps/genericdp", "-n", namespace)
    assert not can("get", "daemonsets.apps/other", "-n", namespace)
    assert not can("list", "daemonsets.apps", "-n", namespace)
