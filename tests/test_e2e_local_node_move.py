"""The kustomize side of docs/dra.md's node move, without a node (it runs on kind: e2e/kind/dra.sh).

Its two overlays are what docs/dra.md tells kustomize users to deploy for
the move: the device-plugin DaemonSet kept off nodes labelled for DRA, and
the DRA deployment beside it under names of its own (cluster-scoped ones
too), only on those nodes, with the ResourceSlice admission policy still
narrowing its renamed ServiceAccount.
"""

from __future__ import annotations

import copy
import os
import re
import textwrap
from pathlib import Path
from typing import Any

from tests.test_e2e_local_dra import DRA_OVERLAY
from tests.test_packaging import (
    BASE,
    LOCAL,
    LOCAL_OVERLAY,
    ROOT,
    by_kind,
    kustomize,
    needs_kubectl,
    yaml_docs,
)

MOVE_DP = LOCAL / "overlay-move-dp"
MOVE_DRA = LOCAL / "overlay-move-dra"
NOT_ON_DRA_NODES = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "genericdp.io/backend", "operator": "NotIn", "values": ["dra"]}
                    ]
                }
            ]
        }
    }
}


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def _cluster_key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


@needs_kubectl
def test_the_device_plugin_side_only_gains_the_affinity() -> None:
    """overlay-move-dp is the local device-plugin deployment plus `NotIn [dra]`, nothing else."""
    plain = {_key(d): d for d in kustomize(LOCAL_OVERLAY)}
    moved = {_key(d): d for d in kustomize(MOVE_DP)}
    assert sorted(moved) == sorted(plain)
    (ds,) = by_kind(list(moved.values()), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["affinity"] == NOT_ON_DRA_NODES
    without = copy.deepcopy(ds)
    del without["spec"]["template"]["spec"]["affinity"]
    assert without == plain[_key(ds)]
    for key, doc in moved.items():
        if doc["kind"] != "DaemonSet":
            assert doc == plain[key]


@needs_kubectl
def test_the_dra_side_names_nothing_the_device_plugin_side_has() -> None:
    """Applying the DRA side replaces none of the device-plugin side's objects."""
    dp = kustomize(MOVE_DP)
    dra = kustomize(MOVE_DRA)
    assert not {_key(d) for d in dp} & {_key(d) for d in dra}
    # Cluster-scoped objects ignore the namespace kustomize writes on them.
    assert not {_cluster_key(d) for d in dp} & {_cluster_key(d) for d in dra}
    assert not by_kind(dra, "Namespace"), "the namespace is the device-plugin side's"


@needs_kubectl
def test_the_dra_side_runs_only_on_dra_nodes_with_its_own_config_and_account() -> None:
    """The renamed DaemonSet: nodeSelector, its ConfigMap, its ServiceAccount and bindings."""
    docs = kustomize(MOVE_DRA)
    (ds,) = by_kind(docs, "DaemonSet")
    (original,) = by_kind(kustomize(DRA_OVERLAY), "DaemonSet")
    assert ds["metadata"]["name"] == "genericdp-dra"
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"genericdp.io/backend": "dra", "kubernetes.io/os": "linux"}
    assert pod["containers"] == original["spec"]["template"]["spec"]["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "genericdp-config-dra"
    (config_map,) = by_kind(docs, "ConfigMap")
    assert config_map["metadata"]["name"] == "genericdp-config-dra"
    assert sorted(config_map["data"]) == ["config.yaml", "dra.yaml", "e2e.yaml"]
    account = pod["serviceAccountName"]
    assert account == "genericdp-dra"
    bound = {
        b["roleRef"]["name"]: b["subjects"]
        for b in by_kind(docs, "ClusterRoleBinding")
        if b["roleRef"]["name"] != "genericdp-deviceclasses-dra"
    }
    assert sorted(bound) == ["genericdp-dra-dra", "genericdp-nodes-dra"]
    for subjects in bound.values():
        assert [s["name"] for s in subjects] == [account]
    (reconciler,) = by_kind(docs, "Deployment")
    (volume,) = reconciler["spec"]["template"]["spec"]["volumes"]
    assert volume["configMap"]["name"] == "genericdp-config-dra"


@needs_kubectl
def test_the_admission_policy_narrows_the_renamed_account() -> None:
    """The ResourceSlice policy matches genericdp-dra, and its binding names the policy."""
    docs = kustomize(MOVE_DRA)
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].endswith('request.userInfo.username.endsWith(":genericdp-dra")')
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    (original,) = by_kind(kustomize(DRA_OVERLAY), "ValidatingAdmissionPolicy")
    assert policy["spec"]["validations"] == original["spec"]["validations"]


# -- docs/dra.md's move, as users copy it ------------------------------------------------

DRA_MD = ROOT / "docs" / "dra.md"


def _move_blocks() -> list[str]:
    """The YAML blocks of docs/dra.md's section on the move, dedented."""
    text = DRA_MD.read_text()
    section = text[text.index("## Moving a node") : text.index("## ResourceSlices")]
    blocks = re.findall(r"^( *)```yaml\n(.*?)^\1```", section, re.DOTALL | re.MULTILINE)
    return [textwrap.dedent(body) for _, body in blocks]


@needs_kubectl
def test_the_docs_dra_overlay_renders_beside_the_base(tmp_path: Path) -> None:
    """The doc's kustomization, over the base, shares no name with the base and is narrowed."""
    overlay = tmp_path / "overlays" / "dra"
    overlay.mkdir(parents=True)
    text = _move_blocks()[0]
    up = os.path.relpath(ROOT / "deploy", overlay)
    (overlay / "kustomization.yaml").write_text(text.replace("../../deploy", up))
    docs = kustomize(overlay)
    base = kustomize(BASE)
    assert not {_cluster_key(d) for d in docs} & {_cluster_key(d) for d in base}
    (ds,) = by_kind(docs, "DaemonSet")
    assert ds["spec"]["template"]["spec"]["nodeSelector"]["genericdp.io/backend"] == "dra"
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (condition,) = policy["spec"]["matchConditions"]
    account = ds["spec"]["template"]["spec"]["serviceAccountName"]
    assert condition["expression"].endswith(f'endsWith(":{account}")')


def test_the_docs_affinity_is_overlay_move_dps() -> None:
    """The doc's device-plugin patch equals overlay-move-dp's."""
    (documented,) = yaml_docs(_move_blocks()[1])
    (applied,) = yaml_docs((MOVE_DP / "not-on-dra-nodes.yaml").read_text())
    assert documented == applied
