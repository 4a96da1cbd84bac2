"""Every documented install runs the daemon as the ServiceAccount its bindings name.

What kustomize and Helm render for the docs' commands (tests/docs_commands.py's
"apply" and "helm" kinds, and ``kubectl kustomize`` of the base), for an
overlay of each component as its header shows it (with no ``namespace:``, with
``kube-system`` and with another one) and for the e2e overlays: the
ServiceAccount, its namespace and every (Cluster)RoleBinding subject agree,
and the DaemonSet (and the reconciler's Deployment) run as a ServiceAccount
that is there. A subject in another namespace is a daemon without its
permissions: it cannot read its Node, so no resource with a ``nodeSelector``
is served and no node label is published.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.apiserver import kube_bin_dir
from tests.docs_commands import REPO, Command, every_command
from tests.npm_tools import helm_binary
from tests.test_docs_commands import _repo_paths, _swapped, _workdir

KUSTOMIZE = REPO / "deploy" / "kustomize"
COMPONENTS = sorted(p.name for p in (KUSTOMIZE / "components").iterdir() if p.is_dir())
E2E_OVERLAYS = sorted(
    str(p.parent.relative_to(REPO)) for p in REPO.glob("e2e/**/overlay*/kustomization.yaml")
)
ROOT_DIR_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: genericdp-kubelet-root-dir
  annotations:
    config.kubernetes.io/local-config: "true"
data:
  rootDir: /var/lib/k0s/kubelet
"""
WORKLOADS = ("DaemonSet", "Deployment")
# Components that add namespaced objects: their headers show the overlay's
# `namespace:`, which places those objects beside the base's (without it they
# land in kubectl's namespace). The others work in an overlay without one.
NEED_A_NAMESPACE = {"dra", "networkpolicy", "node-features"}


def _documented(kind: str) -> list[object]:
    return [
        pytest.param(c, id=f"{c.where} {c.text}"[:100]) for c in every_command() if c.kind == kind
    ]


def _load(text: str) -> list[dict[str, Any]]:
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    bin_dir = kube_bin_dir()
    if bin_dir is None or not (bin_dir / "kubectl").exists():
        pytest.skip("needs kubectl for `kubectl kustomize` (KUBE_BIN_DIR)")
    done = subprocess.run(
        [str(bin_dir / "kubectl"), "kustomize", str(directory)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return _load(done.stdout)


def identities(objects: list[dict[str, Any]], namespace: str) -> dict[str, str]:
    """Each workload's ``namespace/serviceaccount``, after checking that the accounts,
    their namespaces and the bindings' subjects agree. NAMESPACE is where objects that
    name none land (the ``-n`` of the command, else ``default``)."""

    def placed(obj: dict[str, Any]) -> str:
        return str(obj["metadata"].get("namespace") or namespace)

    accounts = {
        f"{placed(o)}/{o['metadata']['name']}" for o in objects if o["kind"] == "ServiceAccount"
    }
    problems = []
    bound = set()
    for obj in objects:
        if obj["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for subject in obj.get("subjects", []):
            if subject["kind"] != "ServiceAccount":
                continue
            # A RoleBinding's subject without a namespace is in the binding's.
            default = placed(obj) if obj["kind"] == "RoleBinding" else "(none)"
            who = f"{subject.get('namespace') or default}/{subject['name']}"
            bound.add(who)
            if who not in accounts:
                problems.append(
                    f"{obj['kind']} {obj['metadata']['name']} binds {who}; "
                    f"the ServiceAccounts are {sorted(accounts)}"
                )
    runs_as = {}
    for obj in objects:
        if obj["kind"] not in WORKLOADS:
            continue
        pod = obj["spec"]["template"]["spec"]
        who = f"{placed(obj)}/{pod.get('serviceAccountName', 'default')}"
        runs_as[f"{obj['kind']} {obj['metadata']['name']}"] = who
        if who not in accounts:
            problems.append(f"{obj['kind']} {obj['metadata']['name']} runs as missing {who}")
        elif who not in bound:
            problems.append(
                f"{obj['kind']} {obj['metadata']['name']} runs as {who}, bound to nothing"
            )
    assert not problems, "\n".join(problems)
    return runs_as


def daemon_identity(objects: list[dict[str, Any]], namespace: str) -> str:
    runs_as = identities(objects, namespace)
    daemons = [who for what, who in runs_as.items() if what.startswith("DaemonSet ")]
    assert len(daemons) == 1, runs_as
    return daemons[0]


def _namespace_flag(words: list[str]) -> str:
    for flag in ("-n", "--namespace"):
        if flag in words:
            return words[words.index(flag) + 1]
    return "default"


def test_the_base_runs_in_kube_system_with_its_permissions() -> None:
    """`kubectl kustomize deploy/kustomize/base`, as the docs and the issue check it."""
    objects = kustomize(KUSTOMIZE / "base")
    assert daemon_identity(objects, "default") == "kube-system/genericdp"


@pytest.mark.parametrize("command", _documented("apply"))
def test_a_documented_kustomize_install_binds_the_daemons_account(command: Command) -> None:
    _kubectl, _apply, *args = shlex.split(command.text)
    directory = REPO / args[args.index("-k") + 1]
    assert daemon_identity(kustomize(directory), _namespace_flag(args)) == "kube-system/genericdp"


@pytest.mark.parametrize("major", ["helm3", "helm4"])
@pytest.mark.parametrize("command", _documented("helm"))
def test_a_documented_helm_install_binds_the_daemons_account(
    command: Command, major: str, tmp_path: Path
) -> None:
    helm = str(helm_binary(major))
    work = _workdir(command, tmp_path)
    _helm, _install, name, chart, *flags = shlex.split(_swapped(command.text))
    flags = _repo_paths(flags, work)
    flags = [f for i, f in enumerate(flags) if "--version" not in (f, flags[i - 1])]
    done = subprocess.run(
        [helm, "template", name, chart, *flags],
        cwd=work, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    namespace = _namespace_flag(flags)
    assert daemon_identity(_load(done.stdout), namespace) == f"{namespace}/genericdp"


def test_a_component_that_needs_the_overlays_namespace_says_so() -> None:
    for component in NEED_A_NAMESPACE:
        header = (KUSTOMIZE / "components" / component / "kustomization.yaml").read_text()
        assert "#   namespace: kube-system\n" in header, component


@pytest.mark.parametrize(
    ("component", "namespace"),
    [
        (component, namespace)
        for component in COMPONENTS
        for namespace in ("kube-system", "hw", None)
        if namespace or component not in NEED_A_NAMESPACE
    ],
)
def test_an_overlay_with_a_component_binds_the_daemons_account(
    component: str, namespace: str | None, tmp_path: Path
) -> None:
    """As each component's header shows it; an overlay's namespace moves the subjects too."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(KUSTOMIZE / "base", overlay)
    resources = [base]
    if component == "kubelet-root-dir":
        (overlay / "root-dir.yaml").write_text(ROOT_DIR_CONFIG)
        resources.append("root-dir.yaml")
    used = os.path.relpath(KUSTOMIZE / "components" / component, overlay)
    (overlay / "kustomization.yaml").write_text(
        (f"namespace: {namespace}\n" if namespace else "")
        + f"resources: [{', '.join(resources)}]\ncomponents: [{used}]\n"
    )
    objects = kustomize(overlay)
    expected = namespace or "kube-system"
    assert daemon_identity(objects, "default") == f"{expected}/genericdp"
    for obj in objects:
        if obj["kind"] in ("ServiceAccount", *WORKLOADS):
            assert obj["metadata"]["namespace"] == expected, obj["metadata"]


@pytest.mark.parametrize("overlay", E2E_OVERLAYS)
def test_an_e2e_overlay_binds_the_daemons_account(overlay: str) -> None:
    assert E2E_OVERLAYS, "no e2e overlay found"
    daemon = daemon_identity(kustomize(REPO / overlay), "default")
    assert daemon.startswith("genericdp-e2e/genericdp"), daemon
