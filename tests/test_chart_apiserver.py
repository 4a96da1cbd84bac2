"""Every Helm variant of the chart, linted and rendered by Helm 3 and Helm 4, is
accepted by a real kube-apiserver (tests/apiserver.py): `kubectl apply
--dry-run=server`, with strict field validation, creates nothing and checks each
object as the cluster would (schemas, defaults, admission).

The Prometheus Operator's monitors are checked against stand-in CRDs that accept
any spec: their kind, group and scope are real, their fields are not checked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apiserver import ApiServer
from tests.npm_tools import helm_binary

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "genericdp"
NAMESPACE = "chart-dry-run"
DIGEST = "sha256:" + "0" * 64
FTDI = ROOT / "configs" / "examples" / "usb-serial-ftdi.yaml"
CONFIG_YAML = (
    "version: v1\nresources:\n  - name: example.com/null\n    match: [{glob: /dev/null}]\n"
)

# name -> helm arguments
VARIANTS: dict[str, tuple[str, ...]] = {
    "defaults": (),
    "privileged": ("--set", "securityContext.privileged=true"),
    "kubelet-root-dir": ("--set", "kubeletRootDir=/var/lib/k0s/kubelet"),
    "networkpolicy": ("--set", "networkPolicy.enabled=true"),
    "digest": ("--set", f"image.digest={DIGEST}"),
    "image-with-tools": (
        "--set", "image.repository=registry.example.com/genericdp-tools", "--set", "image.tag=e2e",
    ),
    "dra": ("--set", "backend=dra"),
    "dra-without-class-reconciler": (
        "--set", "backend=dra", "--set", "dra.classReconciler.enabled=false",
    ),
    "dra-kubelet-root-dir": (
        "--set", "backend=dra", "--set", "kubeletRootDir=/var/lib/k0s/kubelet",
    ),
    "config-yaml": ("--set", "config=null", "--set-string", f"configYaml={CONFIG_YAML}"),
    "extra-config-files": (
        "--set-file", f"extraConfigFiles.ftdi\\.yaml={FTDI}",
    ),
    "overrides": (
        "--set", "fullnameOverride=gdp-x", "--set", "serviceAccount.annotations.a=b",
        "--set", "podAnnotations.a=b", "--set", "nodeSelector.disk=ssd",
    ),
    "pod-monitor": ("--set", "podMonitor.enabled=true", "--set", "podMonitor.labels.release=p"),
    "service-monitor": ("--set", "serviceMonitor.enabled=true"),
    "node-features": ("--set", "nodeFeatures.publish=nodefeature"),
    "node-features-file": ("--set", "nodeFeatures.publish=file"),
}  # fmt: skip

MONITOR_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.monitoring.coreos.com}}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {{kind: {kind}, plural: {plural}, singular: {singular}, listKind: {kind}List}}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"""


@pytest.fixture(scope="module")
def cluster(apiserver: ApiServer) -> Iterator[ApiServer]:
    """The session's API server with the namespace and the monitors' stand-in CRDs."""
    apiserver.kubectl("create", "namespace", NAMESPACE)
    for kind in ("PodMonitor", "ServiceMonitor"):
        singular = kind.lower()
        crd = MONITOR_CRD.format(kind=kind, plural=singular + "s", singular=singular)
        apiserver.kubectl("apply", "-f", "-", input_text=crd)
    for kind in ("podmonitors", "servicemonitors"):
        apiserver.kubectl(
            "wait", "--for=condition=Established", f"crd/{kind}.monitoring.coreos.com",
            "--timeout=60s",
        )  # fmt: skip
    try:
        yield apiserver
    finally:
        apiserver.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        apiserver.kubectl("delete", "crd", "podmonitors.monitoring.coreos.com",
                          "servicemonitors.monitoring.coreos.com")  # fmt: skip


@pytest.mark.parametrize("major", ["helm3", "helm4"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_api_server_accepts_the_variant(
    cluster: ApiServer, major: str, variant: str, tmp_path: Path
) -> None:
    """helm lint passes, helm template renders, and the API server accepts every object."""
    helm = str(helm_binary(major))
    args = VARIANTS[variant]
    lint = subprocess.run(
        [helm, "lint", str(CHART), *args], capture_output=True, text=True, check=False
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    rendered = subprocess.run(
        [helm, "template", "gdp", str(CHART), "--namespace", NAMESPACE, *args],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    manifest = tmp_path / f"{variant}.yaml"
    manifest.write_text(rendered.stdout)
    applied = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", NAMESPACE, "-f", str(manifest)
    )
    kinds = {line.split("/", 1)[0] for line in applied.splitlines()}
    assert any(k.startswith("daemonset.apps") for k in kinds), applied
    assert all("(server dry run)" in line for line in applied.splitlines()), applied
