"""The image, the deployments and the e2e scripts, checked as far as this machine can.

The kind e2e itself runs in GitHub Actions (.github/workflows/e2e.yaml). Here:
every manifest parses; the DaemonSet of the kustomize base, of its rendering
and of the Helm chart keeps the contract of docs/deploy.md (ConfigMap as a
directory, the hostPath mounts, system-node-critical, probes, measured
resources); every config the deployments ship validates with genericdp's own
validator; the Containerfile is multi-stage, labelled and runs ``genericdp
serve``; the workflows run ``./dev test`` and the e2e; the scripts parse, pass
shellcheck, and their polling helpers behave (against stub kubectl/docker).
Tools that are not installed here (kubectl, helm, shellcheck) skip their tests.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.allocation.cdi import spec_file_name
from genericdp.config import load, load_text
from genericdp.discovery import discover
from genericdp.settings import DEFAULT_DRA_PLUGINS_DIR, DEFAULT_DRA_REGISTRATION_DIR
from tests.fakesys import FakeHost

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "kustomize" / "base"
CHART = ROOT / "deploy" / "helm" / "genericdp"
E2E_ROOT = ROOT / "e2e"
E2E = E2E_ROOT / "kind"
LOCAL = E2E_ROOT / "local"
OVERLAY = E2E_ROOT / "overlay"  # shared by kind and the local node
KIND_OVERLAY = E2E / "overlay"
LOCAL_OVERLAY = LOCAL / "overlay"
PRIVILEGED = ROOT / "deploy" / "kustomize" / "components" / "privileged"
KUBELET_ROOT_DIR = ROOT / "deploy" / "kustomize" / "components" / "kubelet-root-dir"
DRA_COMPONENT = ROOT / "deploy" / "kustomize" / "components" / "dra"
WORKFLOWS = ROOT / ".github" / "workflows"
DEMO = ROOT / "configs" / "examples" / "demo.yaml"

# bench/run.py: peak RSS of `genericdp serve` with 50 resources registered, 68.4 MiB
# (docs/deploy.md). The memory request must cover it.
MEASURED_PEAK_RSS_MIB = 69
# genericdp's container start -> /readyz 200 on the local node, the most
# measured (docs/deploy.md, "Probes"): no probe may come sooner.
MEASURED_START_TO_READY_S = 4.5

HOST_MOUNTS = {  # mountPath in the container -> (hostPath, readOnly)
    "/var/lib/kubelet/device-plugins": ("/var/lib/kubelet/device-plugins", False),
    "/var/lib/kubelet/pod-resources": ("/var/lib/kubelet/pod-resources", True),
    "/dev": ("/dev", True),
    # The sysfs trees discovery reads (class, bus, dev links into devices), never /sys.
    "/sys/bus": ("/sys/bus", True),
    "/sys/class": ("/sys/class", True),
    "/sys/dev": ("/sys/dev", True),
    "/sys/devices": ("/sys/devices", True),
    # The database only: /run/udev/control takes commands from any uid 0.
    "/run/udev/data": ("/run/udev/data", True),
    "/var/run/cdi": ("/var/run/cdi", False),  # CDI specs we write for the runtime
    "/var/lib/genericdp": ("/var/lib/genericdp", False),  # the last good config, node-local
}
# Host trees the container must not see: terminals (the device cgroup allows c 136:*)
# and shared memory, hidden under /dev by empty read-only directories.
MASKED = ("/dev/pts", "/dev/shm")
OCI_LABELS = ("title", "description", "source", "licenses", "version", "revision")


def yaml_docs(text: str) -> list[Any]:
    """Plain data (YAML 1.2, so ``on:`` stays a string), empty documents dropped."""
    return [d for d in YAML(typ="safe", pure=True).load_all(text) if d is not None]


def yaml_file(path: Path) -> Any:
    (doc,) = yaml_docs(path.read_text())
    return doc


def yaml_text(data: Any) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(data, out)
    return out.getvalue()


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair in nested mappings and lists."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk(item)


def mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    for suffix, scale in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * scale
    return float(quantity) / 2**20


def millicores(quantity: str) -> float:
    return float(quantity[:-1]) if quantity.endswith("m") else float(quantity) * 1000


def by_kind(docs: list[Any], kind: str) -> list[Any]:
    return [d for d in docs if d.get("kind") == kind]


def assert_daemonset_contract(ds: dict[str, Any], config_map: str) -> None:
    """What docs/deploy.md ("The DaemonSet") promises of it, wherever it comes from."""
    assert not [k for k, _ in walk(ds) if k == "subPath"], "subPath mounts never see updates"
    pod = ds["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    # Device nodes are often tainted NoSchedule; the image is Linux only.
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert {"operator": "Exists"} not in pod["tolerations"], "NoExecute taints must evict it"
    assert pod["nodeSelector"]["kubernetes.io/os"] == "linux"
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}

    config_mount = mounts["/etc/genericdp"]
    config_volume = volumes[config_mount["name"]]
    assert config_volume["configMap"]["name"] == config_map
    assert "items" not in config_volume["configMap"], "every key of the ConfigMap is a file"
    env = {e["name"]: e for e in container["env"]}
    assert env["GENERICDP_CONFIG"]["value"] == "/etc/genericdp"

    for path, (host_path, read_only) in HOST_MOUNTS.items():
        assert path in mounts, f"{path} is not mounted"
        mount = mounts[path]
        source = volumes[mount["name"]]["hostPath"]
        assert source["path"] == host_path, path
        assert source.get("type") in ("Directory", "DirectoryOrCreate"), f"{path}: a directory"
        assert bool(mount.get("readOnly")) is read_only, path
    assert_host_is_read_only_below(volumes, container["volumeMounts"])
    # Nodes whose runtime has no CDI have no /var/run/cdi: Directory would keep the pod off them.
    assert volumes[mounts["/var/run/cdi"]["name"]]["hostPath"]["type"] == "DirectoryOrCreate"
    # A first start on a node creates the state directory; serve reads and writes it there.
    assert volumes[mounts["/var/lib/genericdp"]["name"]]["hostPath"]["type"] == "DirectoryOrCreate"
    assert env["GENERICDP_STATE_DIR"]["value"] == "/var/lib/genericdp"
    assert env["GENERICDP_PLUGIN_DIR"]["value"] == "/var/lib/kubelet/device-plugins"
    assert (
        env["GENERICDP_POD_RESOURCES_SOCKET"]["value"]
        == "/var/lib/kubelet/pod-resources/kubelet.sock"
    )
    assert env["GENERICDP_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"

    (port,) = (p for p in container["ports"] if p["name"] == "metrics")
    assert port["containerPort"] == 9090
    assert env["GENERICDP_METRICS_ADDRESS"]["value"] == ":9090"
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}, probe

    res = container["resources"]
    assert mebibytes(res["requests"]["memory"]) >= MEASURED_PEAK_RSS_MIB
    assert mebibytes(res["limits"]["memory"]) >= 2 * mebibytes(res["requests"]["memory"])
    assert millicores(res["requests"]["cpu"]) <= millicores(res["limits"]["cpu"])

    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert not container["terminationMessagePath"].startswith("/dev/"), "/dev is the host's"
    assert "/tmp" in mounts, "a writable /tmp under a read-only root"


def assert_host_is_read_only_below(volumes: dict[str, Any], mounts: list[dict[str, Any]]) -> None:
    """What the pod can reach on the host: read-only all the way down, nothing above /sys's trees.

    recursiveReadOnly IfPossible, never Enabled: a runtime without recursive
    read-only (containerd 1.6) would then refuse to start the pod at all.
    """
    for mount in mounts:
        source = volumes[mount["name"]]
        if "hostPath" not in source:
            continue
        host_path = source["hostPath"]["path"].rstrip("/") or "/"
        assert host_path not in ("/", "/sys", "/sys/fs", "/run", "/run/udev", "/var"), (
            f"{mount['mountPath']}: hostPath {host_path} brings the host mounts below it"
        )
        if mount["mountPath"] in HOST_MOUNTS and mount.get("readOnly"):  # overlays may add more
            assert mount.get("recursiveReadOnly") == "IfPossible", mount["mountPath"]
    by_path = {m["mountPath"]: m for m in mounts}
    for path in MASKED:
        assert path in by_path, f"the host's {path} is visible"
        assert "emptyDir" in volumes[by_path[path]["name"]], path
        assert by_path[path].get("readOnly") is True, path


def validate_config_map(config_map: dict[str, Any], tmp_path: Path) -> list[str]:
    """Write the ConfigMap's keys as the kubelet would and load them as a directory."""
    directory = tmp_path / config_map["metadata"]["name"]
    directory.mkdir()
    for key, text in config_map["data"].items():
        (directory / key).write_text(text)
    return [r.name for r in load([directory]).resources]


def resources_of(path: Path) -> list[Any]:
    resources: list[Any] = yaml_file(path)["resources"]
    return resources


# -- every manifest -------------------------------------------------------------------


def _manifests() -> list[Path]:
    roots = [ROOT / "deploy", E2E_ROOT, WORKFLOWS]
    found = sorted(p for r in roots for p in r.rglob("*") if p.suffix in (".yaml", ".yml"))
    # Helm templates are Go templates, not YAML; `helm template` renders them below.
    return [p for p in found if "templates" not in p.relative_to(ROOT).parts]


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_manifest_parses(path: Path) -> None:
    """Each YAML file under deploy/, e2e/ and .github/workflows/ is valid YAML."""
    assert yaml_docs(path.read_text()), f"{path} holds no document"


def test_the_manifests_are_found() -> None:
    """The parse test above sees the base, the overlay, the chart and the workflows."""
    names = {str(p.relative_to(ROOT)) for p in _manifests()}
    assert {
        "deploy/kustomize/base/daemonset.yaml",
        "deploy/kustomize/base/kustomization.yaml",
        "deploy/helm/genericdp/values.yaml",
        "e2e/overlay/kustomization.yaml",
        "e2e/kind/overlay/kustomization.yaml",
        "e2e/local/overlay/kustomization.yaml",
        "deploy/kustomize/components/privileged/kustomization.yaml",
        ".github/workflows/ci.yaml",
        ".github/workflows/e2e.yaml",
    } <= names


# -- kustomize base, as written ---------------------------------------------------------


def test_kustomize_base_lists_existing_files_and_a_stable_config_name() -> None:
    """The base's resources exist; its ConfigMap keeps one name (hot reload, no rollout)."""
    kustomization = yaml_file(BASE / "kustomization.yaml")
    for name in kustomization["resources"]:
        assert (BASE / name).is_file(), name
    (generator,) = kustomization["configMapGenerator"]
    assert generator["options"]["disableNameSuffixHash"] is True
    for name in generator["files"]:
        assert (BASE / name).is_file(), name
    # kube-system, where `kubectl apply -k` of the base puts it; the objects name no
    # namespace themselves, so an overlay's `namespace:` moves them all
    # (tests/test_deploy_identity.py).
    assert kustomization["namespace"] == "kube-system"


def test_kustomize_base_daemonset_keeps_the_contract() -> None:
    """The base DaemonSet: ConfigMap directory, host mounts, priority, probes, resources."""
    generator = yaml_file(BASE / "kustomization.yaml")["configMapGenerator"][0]
    docs = yaml_docs((BASE / "daemonset.yaml").read_text())
    (ds,) = by_kind(docs, "DaemonSet")
    assert_daemonset_contract(ds, generator["name"])
    assert "namespace" not in ds["metadata"]


def _container(ds: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = ds["spec"]["template"]["spec"]["containers"][0]
    return container


def _volume(ds: dict[str, Any], name: str) -> dict[str, Any]:
    volumes = ds["spec"]["template"]["spec"]["volumes"]
    volume: dict[str, Any] = next(v for v in volumes if v["name"] == name)
    return volume


BREAKAGES = {
    "a subPath mount": lambda ds: _container(ds)["volumeMounts"][0].update(subPath="config.yaml"),
    "selected ConfigMap keys": lambda ds: _volume(ds, "config")["configMap"].update(
        items=[{"key": "config.yaml", "path": "config.yaml"}]
    ),
    "the PodResources socket instead of its directory": lambda ds: _volume(ds, "pod-resources")[
        "hostPath"
    ].update(path="/var/lib/kubelet/pod-resources/kubelet.sock", type="Socket"),
    "no CDI directory": lambda ds: _container(ds)["volumeMounts"].remove(
        next(m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/var/run/cdi")
    ),
    "a read-only CDI directory": lambda ds: next(
        m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/var/run/cdi"
    ).update(readOnly=True),
    "a CDI directory that must already exist": lambda ds: _volume(ds, "cdi")["hostPath"].update(
        type="Directory"
    ),
    "no state directory (an invalid config at start serves nothing)": lambda ds: _container(ds)[
        "volumeMounts"
    ].remove(
        next(m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/var/lib/genericdp")
    ),
    "a state directory that must already exist": lambda ds: _volume(ds, "state")["hostPath"].update(
        type="Directory"
    ),
    "the state kept in the container (lost at restart)": lambda ds: next(
        e for e in _container(ds)["env"] if e["name"] == "GENERICDP_STATE_DIR"
    ).update(value="/tmp/state"),
    "a writable /sys/devices": lambda ds: next(
        m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/sys/devices"
    ).update(readOnly=False),
    "the whole /sys (the host's cgroup tree below it)": lambda ds: _volume(ds, "sys-devices")[
        "hostPath"
    ].update(path="/sys"),
    "/dev read-only only at the top": lambda ds: next(
        m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/dev"
    ).pop("recursiveReadOnly"),
    "recursive read-only required (no pod on containerd 1.6)": lambda ds: next(
        m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/sys/class"
    ).update(recursiveReadOnly="Enabled"),
    "the host's /dev/pts visible": lambda ds: _container(ds)["volumeMounts"].remove(
        next(m for m in _container(ds)["volumeMounts"] if m["mountPath"] == "/dev/pts")
    ),
    "another priority class": lambda ds: ds["spec"]["template"]["spec"].update(
        priorityClassName="system-cluster-critical"
    ),
    "readiness on /healthz": lambda ds: _container(ds)["readinessProbe"]["httpGet"].update(
        path="/healthz"
    ),
    "less memory than measured": lambda ds: _container(ds)["resources"]["requests"].update(
        memory="32Mi"
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES, ids=list(BREAKAGES))
def test_the_daemonset_contract_check_catches(breakage: str) -> None:
    """Each way of breaking the DaemonSet contract fails the check used on every rendering."""
    ds = yaml_file(BASE / "daemonset.yaml")
    BREAKAGES[breakage](ds)
    with pytest.raises(AssertionError):
        assert_daemonset_contract(ds, "genericdp-config")


DISCOVERY_CONFIG = """
version: v1
resources:
  - name: example.com/serial
    match: [{udev: {subsystem: tty, kernel: "tty*", attributes: {idVendor: "0403"}}}]
    groupBy: parent:usb
  - name: example.com/acm
    match: [{udev: {subsystem: tty, driver: cdc_acm, properties: {ID_VENDOR_ID: "2341"}}}]
  - name: example.com/gpu
    match: [{udev: {subsystem: drm, kernel: "*"}}]
    groupBy: parent:pci
  - name: example.com/sound
    match: [{glob: /dev/snd/*}]
    groupBy: parent:sound
  - name: example.com/loop
    match: [{udev: {subsystem: block, kernel: "loop*"}}]
  - name: example.com/tun
    match: [{glob: /dev/net/tun}]
"""


def test_discovery_needs_only_the_mounted_sysfs_trees(tmp_path: Path) -> None:
    """Discovery over a /sys holding only the mounted trees finds exactly what it finds in all."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(ttys=("ttyUSB0", "ttyUSB1"))
    host.add_usb_acm()
    host.add_drm_card()
    host.add_sound_card()
    host.add_loop(0)
    host.add_misc("net/tun")
    narrow = tmp_path / "narrow" / "sys"
    mounted = [p.removeprefix("/sys/") for p in HOST_MOUNTS if p.startswith("/sys/")]
    for tree in mounted:
        shutil.copytree(host.sys / tree, narrow / tree, symlinks=True)
    assert {p.name for p in host.sys.iterdir()} - set(mounted), "the fake has more than we mount"
    config = load_text(DISCOVERY_CONFIG, "discovery.yaml")
    full_roots = host.roots
    narrow_roots = replace(host.roots, sys=narrow)
    for definition in config.resources:
        everything = discover(definition, full_roots)
        assert everything, definition.name
        assert discover(definition, narrow_roots) == everything, definition.name


def test_kustomize_base_may_only_read_nodes() -> None:
    """The base's one API need is its Node's labels (nodeSelector): the pod asks for a
    token, and the only role bound to its ServiceAccount gets, lists and watches nodes."""
    sa = yaml_file(BASE / "serviceaccount.yaml")
    assert sa["automountServiceAccountToken"] is False
    pod = yaml_file(BASE / "daemonset.yaml")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is True
    role, binding = (
        d for d in YAML(typ="safe", pure=True).load_all((BASE / "rbac.yaml").read_text()) if d
    )
    assert role["kind"] == "ClusterRole"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "default"}
    ]
    assert "rbac.yaml" in yaml_file(BASE / "kustomization.yaml")["resources"]


def test_kustomize_base_config_validates_and_is_the_demo() -> None:
    """The base's config.yaml passes genericdp's validator and serves the demo resources."""
    names = [r.name for r in load([BASE / "config.yaml"]).resources]
    assert names == ["example.com/null", "example.com/zero", "example.com/loop", "example.com/fuse"]
    assert resources_of(BASE / "config.yaml") == resources_of(DEMO)


def test_e2e_overlay_config_validates_next_to_the_base() -> None:
    """The e2e resources load together with the base's (one directory, no duplicate names)."""
    config = load([BASE / "config.yaml", OVERLAY / "e2e.yaml"])
    names = {r.name for r in config.resources}
    assert {"example.com/e2e-dev", "example.com/e2e-hotplug", "example.com/e2e-health"} <= names


def test_local_cdi_config_validates_next_to_the_e2e_ones() -> None:
    """The CDI run's resource loads with the base's and the e2e ones, with cdi: true."""
    config = load([BASE / "config.yaml", OVERLAY / "e2e.yaml", LOCAL / "cdi.yaml"])
    (cdi,) = (r for r in config.resources if r.name == "example.com/e2e-cdi")
    assert cdi.allocate.cdi is True


def test_every_e2e_check_runs_by_default_on_kind_or_the_local_node() -> None:
    """KIND_CHECKS and LOCAL_CHECKS together are ALL_CHECKS, each in its order: a check
    left out of both would run nowhere in CI."""
    text = (E2E_ROOT / "checks.sh").read_text()
    lists = {
        name: re.search(rf"^{name}=\((.*?)\)", text, re.DOTALL | re.MULTILINE)
        for name in ("ALL_CHECKS", "KIND_CHECKS", "LOCAL_CHECKS")
    }
    every, kind, local = (m[1].split() if m else [] for m in lists.values())
    assert every, "no ALL_CHECKS in e2e/checks.sh"
    kind = every if kind == ['"${ALL_CHECKS[@]}"'] else kind
    assert set(kind) | set(local) == set(every), set(every) - set(kind) - set(local)
    for way in (kind, local):
        assert way == [c for c in every if c in way], way
    for check in every:
        assert re.search(rf"^check_{check}\(\) \{{", text, re.MULTILINE), check


def test_e2e_checks_expect_every_deployed_resource() -> None:
    """checks.sh waits for the re-registration of exactly the resources the e2e deploys."""
    text = (E2E_ROOT / "checks.sh").read_text()
    match = re.search(r"^RESOURCES=\((.*?)\)", text, re.DOTALL | re.MULTILINE)
    assert match, "RESOURCES=(...) not found in checks.sh"
    expected = [r.name for r in load([BASE / "config.yaml", OVERLAY / "e2e.yaml"]).resources]
    assert sorted(match.group(1).split()) == sorted(expected)


NETWORK_POLICY = ROOT / "deploy" / "kustomize" / "components" / "networkpolicy"


def assert_network_policy_fits(policy: dict[str, Any], ds: dict[str, Any]) -> None:
    """The policy selects the DaemonSet's pods, allows no egress and only the metrics port in."""
    pod = ds["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["spec"]["egress"] == [], "genericdp needs no network: unix sockets only"
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in (ports["metrics"], "metrics"), port
        assert rule["from"], "an ingress rule without peers admits everyone"


def test_network_policy_component_selects_the_daemonset_and_only_its_metrics_port() -> None:
    """deploy/kustomize/components/networkpolicy: a Component whose policy fits the base."""
    kustomization = yaml_file(NETWORK_POLICY / "kustomization.yaml")
    assert kustomization["kind"] == "Component"
    (name,) = kustomization["resources"]
    policy = yaml_file(NETWORK_POLICY / name)
    assert policy["kind"] == "NetworkPolicy"
    assert_network_policy_fits(policy, yaml_file(BASE / "daemonset.yaml"))


# -- kustomize, rendered ----------------------------------------------------------------

needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def kustomize(path: Path) -> list[Any]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return yaml_docs(result.stdout)


@needs_kubectl
def test_kustomize_base_renders_a_daemonset_keeping_the_contract(tmp_path: Path) -> None:
    """`kubectl kustomize` of the base keeps the contract; its ConfigMap validates as a dir."""
    docs = kustomize(BASE)
    (ds,) = by_kind(docs, "DaemonSet")
    (cm,) = by_kind(docs, "ConfigMap")
    assert cm["metadata"]["name"] == "genericdp-config", "no hash suffix"
    assert_daemonset_contract(ds, cm["metadata"]["name"])
    assert validate_config_map(cm, tmp_path) == [
        "example.com/null",
        "example.com/zero",
        "example.com/loop",
        "example.com/fuse",
    ]


@needs_kubectl
def test_e2e_overlay_renders_the_local_image_and_both_config_files(tmp_path: Path) -> None:
    """The kind e2e overlay: the image the run pushes, tagged with the chart's appVersion, never
    pulled (the documented install pulled it), the flag mount, both config files."""
    docs = kustomize(KIND_OVERLAY)
    (ds,) = by_kind(docs, "DaemonSet")
    (cm,) = by_kind(docs, "ConfigMap")
    assert_daemonset_contract(ds, cm["metadata"]["name"])
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped} == {
        "genericdp-e2e"
    }
    (binding,) = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "genericdp-e2e"
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    chart = (CHART / "Chart.yaml").read_text()
    app_version = re.search(r'^appVersion: "?([^"\s]+)', chart, re.MULTILINE)
    assert app_version
    assert container["image"] == f"localhost:5001/genericdp:{app_version[1]}"
    assert container["imagePullPolicy"] == "Never"
    assert "/var/lib/genericdp-e2e" in {m["mountPath"] for m in container["volumeMounts"]}
    assert sorted(cm["data"]) == ["config.yaml", "e2e.yaml"]
    assert "example.com/e2e-health" in validate_config_map(cm, tmp_path)


@needs_kubectl
def test_base_with_the_network_policy_component_renders(tmp_path: Path) -> None:
    """An overlay of the base plus the component renders both, and the policy fits."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base, component = (os.path.relpath(p, overlay) for p in (BASE, NETWORK_POLICY))
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: kube-system\nresources: [{base}]\ncomponents: [{component}]\n"
    )
    docs = kustomize(overlay)
    (ds,) = by_kind(docs, "DaemonSet")
    (policy,) = by_kind(docs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == ds["metadata"]["namespace"] == "kube-system"
    assert_network_policy_fits(policy, ds)


def root_dir_overlay(
    overlay: Path, root_dir: str | None, components: tuple[Path, ...] = (KUBELET_ROOT_DIR,)
) -> Path:
    """An overlay of the base with the kubelet-root-dir component, as its comment tells users."""
    overlay.mkdir()
    base = os.path.relpath(BASE, overlay)
    component = ", ".join(os.path.relpath(p, overlay) for p in components)
    resources = [base]
    if root_dir is not None:
        (overlay / "kubelet-root-dir.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: genericdp-kubelet-root-dir\n"
            '  annotations:\n    config.kubernetes.io/local-config: "true"\n'
            f"data:\n  rootDir: {root_dir}\n"
        )
        resources.append("kubelet-root-dir.yaml")
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: kube-system\nresources: [{', '.join(resources)}]\n"
        f"components: [{component}]\n"
    )
    return overlay


@needs_kubectl
@pytest.mark.parametrize(
    "root_dir", ["/var/lib/k0s/kubelet", "/var/snap/microk8s/common/var/lib/kubelet"]
)
def test_kubelet_root_dir_component_moves_only_the_pod_resources_host_path(
    tmp_path: Path, root_dir: str
) -> None:
    """The kubelet-root-dir component moves pod-resources' hostPath and nothing else."""
    docs = kustomize(root_dir_overlay(tmp_path / "overlay", root_dir))
    # The local-config ConfigMap is read, not deployed.
    assert [cm["metadata"]["name"] for cm in by_kind(docs, "ConfigMap")] == ["genericdp-config"]
    (ds,) = by_kind(docs, "DaemonSet")
    assert _volume(ds, "pod-resources")["hostPath"]["path"] == f"{root_dir}/pod-resources"
    # The device-plugin directory and every path inside the container stay.
    (base,) = by_kind(kustomize(BASE), "DaemonSet")
    _volume(base, "pod-resources")["hostPath"]["path"] = f"{root_dir}/pod-resources"
    base["metadata"]["namespace"] = "kube-system"
    assert ds == base


DRA_DIRS = {  # volume -> the variable that tells genericdp the directory
    "plugins-registry": ("/plugins_registry", "GENERICDP_DRA_REGISTRATION_DIR"),
    "plugins": ("/plugins", "GENERICDP_DRA_PLUGINS_DIR"),
}


def _mount(ds: dict[str, Any], name: str) -> dict[str, Any]:
    mount: dict[str, Any] = next(m for m in _container(ds)["volumeMounts"] if m["name"] == name)
    return mount


def _env_var(ds: dict[str, Any], name: str) -> dict[str, Any]:
    var: dict[str, Any] = next(e for e in _container(ds)["env"] if e["name"] == name)
    return var


@needs_kubectl
@pytest.mark.parametrize(
    "components",
    [(DRA_COMPONENT, KUBELET_ROOT_DIR), (KUBELET_ROOT_DIR, DRA_COMPONENT)],
    ids=["dra first", "kubelet-root-dir first"],
)
def test_kubelet_root_dir_component_with_dra_moves_the_dra_directories_too(
    tmp_path: Path, components: tuple[Path, ...]
) -> None:
    """In either order: plugins_registry/ and plugins/ under --root-dir, at their host paths."""
    root_dir = "/var/lib/k0s/kubelet"
    overlay = tmp_path / "overlay"
    docs = kustomize(root_dir_overlay(overlay, root_dir, components))
    (ds,) = by_kind(docs, "DaemonSet")
    for volume, (suffix, variable) in DRA_DIRS.items():
        moved = root_dir + suffix
        # The kubelet dials the DRA socket at the path genericdp announces: the
        # container must see each directory at its host path, and be told it.
        assert _volume(ds, volume)["hostPath"]["path"] == moved
        assert _mount(ds, volume)["mountPath"] == moved
        assert _env_var(ds, variable)["value"] == moved
    # Everything else as `dra` alone has it, pod-resources moved as without DRA.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"namespace: kube-system\nresources: [{os.path.relpath(BASE, plain)}]\n"
        f"components: [{os.path.relpath(DRA_COMPONENT, plain)}]\n"
    )
    (expected,) = by_kind(kustomize(plain), "DaemonSet")
    _volume(expected, "pod-resources")["hostPath"]["path"] = f"{root_dir}/pod-resources"
    for volume, (suffix, variable) in DRA_DIRS.items():
        _volume(expected, volume)["hostPath"]["path"] = root_dir + suffix
        _mount(expected, volume)["mountPath"] = root_dir + suffix
        _env_var(expected, variable)["value"] = root_dir + suffix
    assert ds == expected
    assert _volume(ds, "device-plugins")["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"


@needs_kubectl
def test_the_dra_component_states_its_directories_at_their_defaults(tmp_path: Path) -> None:
    """What the kubelet-root-dir component moves is there to move: the settings' defaults."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(BASE, overlay)}]\n"
        f"components: [{os.path.relpath(DRA_COMPONENT, overlay)}]\n"
    )
    (ds,) = by_kind(kustomize(overlay), "DaemonSet")
    assert ds["metadata"]["annotations"]["genericdp.io/backend"] == "dra"
    for volume, path, variable in (
        ("plugins-registry", DEFAULT_DRA_REGISTRATION_DIR, "GENERICDP_DRA_REGISTRATION_DIR"),
        ("plugins", DEFAULT_DRA_PLUGINS_DIR, "GENERICDP_DRA_PLUGINS_DIR"),
    ):
        assert _volume(ds, volume)["hostPath"]["path"] == str(path)
        assert _mount(ds, volume)["mountPath"] == str(path)
        assert _env_var(ds, variable)["value"] == str(path)


@needs_kubectl
def test_kubelet_root_dir_component_without_its_config_map_fails_naming_it(
    tmp_path: Path,
) -> None:
    """Without the rootDir ConfigMap the component fails the build, naming what is missing."""
    overlay = root_dir_overlay(tmp_path / "overlay", None)
    result = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "genericdp-kubelet-root-dir" in result.stderr
    assert "data.rootDir" in result.stderr


def local_node_setting(name: str) -> str:
    """A NAME=value line of e2e/local/node-lib.sh, with $VARIABLES of earlier lines expanded."""
    values: dict[str, str] = {}
    for line in (LOCAL / "node-lib.sh").read_text().splitlines():
        match = re.fullmatch(r"([A-Z0-9_]+)=(\S+)", line)
        if match:
            values[match[1]] = re.sub(r"\$([A-Z0-9_]+)", lambda m: values.get(m[1], m[0]), match[2])
    return values[name]


@needs_kubectl
def test_local_overlay_changes_the_image_pod_resources_api_server_and_state_dir() -> None:
    """The local-node overlay: its image, pod-resources under its kubelet's --root-dir, the API
    server's own address (no kube-proxy) and genericdp's state under the node's directory."""
    overlay = yaml_file(LOCAL_OVERLAY / "kustomization.yaml")
    assert overlay["components"] == [os.path.relpath(KUBELET_ROOT_DIR, LOCAL_OVERLAY)]
    assert overlay["patches"] == [{"path": "api-server.yaml"}, {"path": "state-dir.yaml"}]
    kind = by_kind(kustomize(KIND_OVERLAY), "DaemonSet")[0]
    local = by_kind(kustomize(LOCAL_OVERLAY), "DaemonSet")[0]
    (container,) = local["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "localhost/genericdp:e2e"
    pod_resources = _volume(local, "pod-resources")["hostPath"]["path"]
    assert pod_resources == local_node_setting("KUBELET_ROOT") + "/pod-resources"
    state = _volume(local, "state")["hostPath"]["path"]
    assert state.startswith(local_node_setting("NODE_STATE") + "/"), "down.sh removes it"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBERNETES_SERVICE_HOST"] == local_node_setting("NODE_IP")
    assert env["KUBERNETES_SERVICE_PORT"] == "6443"
    # Everything else as on kind: the device-plugin directory is fixed whatever --root-dir says.
    _volume(kind, "pod-resources")["hostPath"]["path"] = pod_resources
    _volume(kind, "state")["hostPath"]["path"] = state
    (kind_container,) = kind["spec"]["template"]["spec"]["containers"]
    kind_container["image"] = container["image"]
    kind_container["env"] = container["env"]
    for ds in (kind, local):
        ds["spec"]["template"]["spec"]["volumes"].sort(key=lambda v: v["name"])
    assert local == kind


def apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The replace operations of a JSON patch (all the privileged component uses)."""
    for op in ops:
        assert op["op"] == "replace", op
        *parents, last = op["path"].strip("/").split("/")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        assert last in node, f"{op['path']} is not in the base"
        node[last] = op["value"]


def test_privileged_component_sets_what_the_api_server_accepts() -> None:
    """The privileged component: privileged true with escalation allowed, as the API server asks."""
    component = yaml_file(PRIVILEGED / "kustomization.yaml")
    assert component["kind"] == "Component"
    (ds,) = by_kind(yaml_docs((BASE / "daemonset.yaml").read_text()), "DaemonSet")
    for patch in component["patches"]:
        assert patch["target"] == {"kind": "DaemonSet", "name": "genericdp"}
        apply_json_patch(ds, yaml_docs(patch["patch"])[0])
    security = _container(ds)["securityContext"]
    assert security["privileged"] is True
    # The API server refuses privileged: true with allowPrivilegeEscalation: false.
    assert security.get("allowPrivilegeEscalation", True) is True


@needs_kubectl
def test_e2e_privileged_overlays_render_a_privileged_daemonset() -> None:
    """Both e2e privileged overlays add the component to their way's overlay and nothing else."""
    for way in (E2E, LOCAL):
        (ds,) = by_kind(kustomize(way / "overlay-privileged"), "DaemonSet")
        security = _container(ds)["securityContext"]
        assert security["privileged"] is True
        assert security["allowPrivilegeEscalation"] is True


# -- Helm chart ---------------------------------------------------------------------------


def helm_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml_file(CHART / "values.yaml")
    return values


def test_helm_values_config_validates() -> None:
    """values.config, rendered to YAML as templates/configmap.yaml does, passes the validator."""
    values = helm_values()
    config = load_text(yaml_text(values["config"]), "values.yaml:config")
    assert [r.name for r in config.resources] == [
        "example.com/null",
        "example.com/zero",
        "example.com/loop",
        "example.com/fuse",
    ]
    assert values["config"]["resources"] == resources_of(DEMO)
    assert values["extraConfigFiles"] == {}


def test_helm_values_keep_the_measured_resources_and_least_privilege() -> None:
    """The chart's defaults are the base's: same requests, limits and security context."""
    values = helm_values()
    base = yaml_file(BASE / "daemonset.yaml")["spec"]["template"]["spec"]
    (container,) = base["containers"]
    assert values["resources"] == container["resources"]
    assert values["securityContext"] == container["securityContext"]
    assert values["priorityClassName"] == base["priorityClassName"]
    assert values["tolerations"] == base["tolerations"]


def test_helm_templates_mount_the_config_as_a_directory() -> None:
    """No subPath and no config checksum in the chart: edits are hot reloaded, not rolled."""
    templates = {p.name: p.read_text() for p in (CHART / "templates").iterdir()}
    everything = "\n".join(templates.values())
    assert not re.search(r"^[\s-]*subPath:", everything, re.MULTILINE), "subPath never sees updates"
    assert "checksum/config" not in everything
    assert "toYaml . | nindent 4" in templates["configmap.yaml"]
    daemonset = templates["daemonset.yaml"]
    for needle in ("path: /healthz", "path: /readyz", "mountPath: /etc/genericdp", "spec.nodeName"):
        assert needle in daemonset, needle


needs_helm = pytest.mark.skipif(shutil.which("helm") is None, reason="helm not installed")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["helm", *args], capture_output=True, text=True, check=False)


@needs_helm
def test_helm_chart_lints() -> None:
    """`helm lint` finds nothing wrong with the chart."""
    result = helm("lint", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
def test_helm_chart_renders_a_daemonset_keeping_the_contract(tmp_path: Path) -> None:
    """`helm template` with an extra config file: the contract holds, both files validate."""
    extra = ROOT / "configs" / "examples" / "usb-serial-ftdi.yaml"
    result = helm(
        "template", "gdp", str(CHART), "--namespace", "kube-system",
        "--set-file", f"extraConfigFiles.serial\\.yaml={extra}",
        "--set", "kubeletRootDir=/var/snap/microk8s/common/var/lib/kubelet/",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = yaml_docs(result.stdout)
    (ds,) = by_kind(docs, "DaemonSet")
    (cm,) = by_kind(docs, "ConfigMap")
    pod = ds["spec"]["template"]["spec"]
    # Another kubelet root moves the host side of pod-resources only (the kubelet
    # fixes its device-plugin directory); the container sees the usual paths.
    host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert "/var/snap/microk8s/common/var/lib/kubelet/pod-resources" in host_paths
    assert "/var/lib/kubelet/device-plugins" in host_paths
    for volume in pod["volumes"]:
        if "hostPath" in volume:
            volume["hostPath"]["path"] = volume["hostPath"]["path"].replace(
                "/var/snap/microk8s/common", ""
            )
    assert_daemonset_contract(ds, cm["metadata"]["name"])
    assert sorted(cm["data"]) == ["config.yaml", "serial.yaml"]
    names = validate_config_map(cm, tmp_path)
    assert "example.com/null" in names
    assert len(names) == 4 + len(load([extra]).resources)


def test_helm_values_bind_every_pod_address_and_leave_the_network_policy_optional() -> None:
    """The probes need the pod IP (empty bind address); the NetworkPolicy is opt-in."""
    values = helm_values()
    assert values["metricsBindAddress"] == ""
    assert values["networkPolicy"] == {"enabled": False, "metricsFrom": []}
    template = (CHART / "templates" / "networkpolicy.yaml").read_text()
    assert "{{- if .Values.networkPolicy.enabled }}" in template


@needs_helm
def test_helm_chart_renders_the_network_policy_when_enabled() -> None:
    """networkPolicy.enabled renders a policy that fits the chart's DaemonSet."""
    result = helm(
        "template", "gdp", str(CHART), "--set", "networkPolicy.enabled=true",
        "--set-json", 'networkPolicy.metricsFrom=[{"podSelector":{"matchLabels":{"app":"prom"}}}]',
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    docs = yaml_docs(result.stdout)
    (ds,) = by_kind(docs, "DaemonSet")
    (policy,) = by_kind(docs, "NetworkPolicy")
    assert_network_policy_fits(policy, ds)


@needs_helm
def test_helm_privileged_switch_renders_what_the_api_server_accepts() -> None:
    """`--set securityContext.privileged=true` alone renders no allowPrivilegeEscalation: false."""
    result = helm("template", "gdp", str(CHART), "--set", "securityContext.privileged=true")
    assert result.returncode == 0, result.stderr
    (ds,) = by_kind(yaml_docs(result.stdout), "DaemonSet")
    security = _container(ds)["securityContext"]
    assert security["privileged"] is True
    assert security.get("allowPrivilegeEscalation", True) is True
    assert security["readOnlyRootFilesystem"] is True


@needs_helm
def test_helm_chart_refuses_extra_files_genericdp_would_not_read() -> None:
    """An extraConfigFiles name without .yaml/.yml fails the render, naming it and the rule."""
    result = helm("template", "gdp", str(CHART), "--set", "extraConfigFiles.notes\\.txt=x")
    assert result.returncode != 0
    # The schema refuses it first; Helm 3 and Helm 4 word that differently.
    assert "notes.txt" in result.stderr
    assert "(yaml|yml)$" in result.stderr


# -- Containerfile ------------------------------------------------------------------------


def containerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = (ROOT / "Containerfile").read_text()
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    out = []
    for line in logical.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_containerfile_is_multi_stage_with_only_the_venv_in_the_final_stage() -> None:
    """A builder installs the wheel into a venv; the final stage copies only that (and tini)."""
    instructions = containerfile_instructions()
    froms = [args for word, args in instructions if word == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith("AS builder")
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    final = instructions[last_from:]
    copies = [args for word, args in final if word == "COPY"]
    assert copies == [
        "--from=builder /usr/bin/tini /usr/bin/tini",
        "--from=builder /opt/genericdp /opt/genericdp",
    ]
    assert not [args for word, args in final if word == "RUN"], (
        "nothing installed in the final stage"
    )


def test_containerfile_builds_on_any_debian_python3_base() -> None:
    """Both stages FROM ${PYTHON_IMAGE}; RUN calls python3 (Debian's python3 has no `python`)."""
    instructions = containerfile_instructions()
    bases = [args for word, args in instructions if word == "ARG" and args.startswith("PYTHON_")]
    assert len(bases) == 1
    assert bases[0].startswith("PYTHON_IMAGE=python:3.11-slim@sha256:"), bases
    froms = [args.split()[0] for word, args in instructions if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    runs = " ".join(args for word, args in instructions if word == "RUN")
    assert "python3 -m venv" in runs
    bare = re.findall(r"(?<![\w/.-])python(?![\w.-])", runs)
    assert not bare, f"`python` is not on Debian's python3 base: {runs}"


def test_containerfile_downloads_nothing_architecture_specific() -> None:
    """Multi-arch: no instruction names an architecture (wheels and tini come per platform)."""
    for word, args in containerfile_instructions():
        assert not re.search(r"amd64|arm64|x86_64|aarch64", args), f"{word} {args}"


def test_containerfile_has_the_oci_labels() -> None:
    """title, description, source, licenses, version, revision; the variable ones build args."""
    labels = " ".join(args for word, args in containerfile_instructions() if word == "LABEL")
    found = dict(re.findall(r'org\.opencontainers\.image\.(\w+)="([^"]*)"', labels))
    assert set(OCI_LABELS) <= set(found)
    assert found["version"] == "${VERSION}"
    assert found["revision"] == "${REVISION}"
    assert found["source"] == "${SOURCE}"
    assert found["licenses"] == "Apache-2.0"
    args = {a.split("=")[0] for w, a in containerfile_instructions() if w == "ARG"}
    assert {"VERSION", "REVISION", "SOURCE"} <= args


def test_containerfile_runs_genericdp_serve() -> None:
    """ENTRYPOINT + CMD is `genericdp serve` (under tini), with the config directory preset."""
    instructions = dict(containerfile_instructions())
    argv = json.loads(instructions["ENTRYPOINT"]) + json.loads(instructions["CMD"])
    assert argv[-2:] == ["genericdp", "serve"]
    assert argv[0] == "/usr/bin/tini"
    assert "GENERICDP_CONFIG=/etc/genericdp" in instructions["ENV"]


def test_dockerignore_admits_exactly_what_the_build_copies() -> None:
    """The build context is an allowlist: everything the builder COPYs, and no .venv or .git."""
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    sources: set[str] = set()
    for word, args in containerfile_instructions():
        if word == "COPY" and not args.startswith("--from"):
            sources.update(part.rstrip("/") for part in args.split()[:-1])
    assert sources == allowed


# -- workflows ------------------------------------------------------------------------------


def steps(workflow: dict[str, Any]) -> list[str]:
    return [s.get("run", "") for job in workflow["jobs"].values() for s in job["steps"]]


def test_ci_workflow_runs_dev_test_on_pushes_and_pull_requests() -> None:
    """ci.yaml runs `./dev test` on push and pull_request, which installs its own Helm."""
    ci = yaml_file(WORKFLOWS / "ci.yaml")
    assert {"push", "pull_request"} <= set(ci["on"])
    runs = steps(ci)
    assert "./dev test" in runs
    assert any("etcd-server" in r for r in runs)
    assert "e2e/local/npm-tools.sh" in (ROOT / "dev").read_text()


def test_e2e_workflow_runs_the_kind_e2e_on_three_or_more_kubernetes_versions() -> None:
    """e2e.yaml runs e2e/kind/run.sh per Kubernetes version, each with a pinned node image."""
    e2e = yaml_file(WORKFLOWS / "e2e.yaml")
    assert "pull_request" in e2e["on"]
    versions = e2e["jobs"]["kind"]["strategy"]["matrix"]["kubernetes"]
    assert len(versions) >= 3
    images = dict(
        line.split()
        for line in (E2E / "node-images.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    for version in versions:
        assert version in images, f"no node image for {version}"
        assert re.fullmatch(
            rf"kindest/node:v{re.escape(version)}\.\d+@sha256:[0-9a-f]{{64}}", images[version]
        )
    assert any("e2e/kind/run.sh" in r for r in steps(e2e))
    assert any("--platform linux/amd64,linux/arm64" in r for r in steps(e2e))


def test_example_image_with_tools_builds_from_the_image_given_and_is_built_in_ci() -> None:
    """The example FROM genericdp takes the base as a build argument and images.sh builds it."""
    example = ROOT / "deploy" / "examples" / "image-with-tools"
    lines = [
        line
        for line in (example / "Containerfile").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # No default: a version written here would drift from the release deployed.
    assert lines[:2] == ["ARG GENERICDP_IMAGE", "FROM ${GENERICDP_IMAGE}"]
    assert not any(line.startswith(("ENTRYPOINT", "CMD", "USER")) for line in lines)
    images = (LOCAL / "images.sh").read_text()
    assert 'GENERICDP_IMAGE="$GENERICDP_IMAGE"' in images
    assert "deploy/examples/image-with-tools" in images
    assert "--read-only" in images
    assert "--network none" in images


def chart_probes() -> dict[str, Any]:
    """The probes of the chart's DaemonSet template: plain YAML there, no template actions."""
    text = (CHART / "templates" / "daemonset.yaml").read_text()
    match = re.search(r"^( +)livenessProbe:\n.*?(?=^ +\{\{)", text, re.MULTILINE | re.DOTALL)
    assert match, "no livenessProbe block followed by a template action"
    block = textwrap.dedent(match[0])
    assert "{{" not in block
    probes: dict[str, Any] = YAML(typ="safe", pure=True).load(block)
    return probes


def test_probes_wait_for_the_measured_start_and_agree_in_base_and_chart() -> None:
    """No probe before genericdp's measured start, and the chart's probes are the base's."""
    container = _container(yaml_file(BASE / "daemonset.yaml"))
    probes = {name: container[name] for name in ("livenessProbe", "readinessProbe")}
    assert chart_probes() == probes
    for name, probe in probes.items():
        # A probe of a port nobody listens on yet fails: a Warning event per start.
        assert probe["initialDelaySeconds"] > MEASURED_START_TO_READY_S, name
        assert probe["timeoutSeconds"] <= probe["periodSeconds"] + 1, name
    ready = probes["readinessProbe"]
    # Ready follows readiness within a period: a rollout waits for it on every node.
    first_ready = ready["initialDelaySeconds"] + ready["periodSeconds"]
    assert first_ready <= 2 * MEASURED_START_TO_READY_S + 1
    # Liveness fails only when the event loop is stuck; never before readiness could pass.
    assert probes["livenessProbe"]["initialDelaySeconds"] >= ready["initialDelaySeconds"]


def test_e2e_workflow_runs_the_kind_e2e_with_the_release_images() -> None:
    """Each kind job runs e2e/kind/run.sh with the kind release and kindest/node, then the dry run.

    The image is pushed to the run's registry and pulled by the nodes, never side-loaded (the
    quick start's `kind load` runs verbatim from its page, install.sh load, between the installs,
    the image removed from the nodes before and after).
    """
    kind = yaml_file(WORKFLOWS / "e2e.yaml")["jobs"]["kind"]
    (run,) = [s for s in kind["steps"] if "e2e/kind/run.sh" in s.get("run", "")]
    assert run["env"]["KIND_SOURCE"] == "release"
    assert any("e2e/kind/install-kind.sh" in s.get("run", "") for s in kind["steps"])
    assert any("e2e/kind/helm-dry-run.sh" in s.get("run", "") for s in kind["steps"])
    for script in E2E.glob("*.sh"):
        assert not re.search(r"^[^#]*kind load ", script.read_text(), re.MULTILINE), script.name
    assert 'install.sh" push' in (E2E / "run.sh").read_text()


def test_cdi_round_waits_for_the_spec_file_genericdp_writes() -> None:
    """e2e/local/cdi.sh waits for the spec under the name genericdp gives it (spec_file_name)."""
    match = re.search(r"^SPEC=(\S+)$", (LOCAL / "cdi.sh").read_text(), re.MULTILINE)
    assert match, "no SPEC= line in e2e/local/cdi.sh"
    names = [r.name for r in load([LOCAL / "cdi.yaml"]).resources]
    assert match[1] == f"/var/run/cdi/{spec_file_name('example.com/e2e-cdi')}"
    assert names == ["example.com/e2e-cdi", "example.com/e2e-nonroot"]


# -- e2e scripts ------------------------------------------------------------------------------

SCRIPTS = sorted(E2E_ROOT.rglob("*.sh"))
# lib.sh and *-lib.sh are sourced by the others, never run.


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(E2E_ROOT)))
def test_e2e_script_parses(script: Path) -> None:
    """`bash -n` accepts the script; the runnable ones are executable with a bash shebang."""
    result = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    if script.name != "lib.sh" and not script.name.endswith("-lib.sh"):
        assert os.access(script, os.X_OK), f"{script.name} is not executable"
        assert script.read_text().startswith("#!/usr/bin/env bash\n")


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_e2e_scripts_pass_shellcheck() -> None:
    """shellcheck (following `source`) finds nothing in e2e/**/*.sh."""
    result = subprocess.run(
        ["shellcheck", "-x", *map(str, SCRIPTS)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


# The polling helpers decide whether the e2e passes; run them against stubs.

STUB = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$STUBS/{name}.args"
cat "$STUBS/{name}.out" 2>/dev/null || true
"""


@pytest.fixture
def stubs(tmp_path: Path) -> Path:
    """A directory of fake kubectl, docker and kind that answer from <name>.out files."""
    for name in ("kubectl", "docker", "kind"):
        path = tmp_path / name
        path.write_text(STUB.replace("{name}", name))
        path.chmod(0o755)
    return tmp_path


def run_checks_snippet(stubs: Path, snippet: str) -> subprocess.CompletedProcess[str]:
    """Source checks.sh for kind (kind-lib.sh, lib.sh), the stubs first on PATH; run snippet."""
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "STUBS": str(stubs),
        "CLUSTER": "t",
        "ARTIFACTS": str(stubs / "artifacts"),
        "POLL": "0.02",
        "HOME": str(stubs),
    }
    script = f"set -euo pipefail\nsource {E2E_ROOT / 'checks.sh'} kind\n{snippet}\n"
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_wait_quantity_reads_the_node_status_with_escaped_dots(stubs: Path) -> None:
    """wait_quantity returns once the node shows the value, asking jsonpath with dots escaped."""
    (stubs / "kubectl.out").write_text("4")
    result = run_checks_snippet(stubs, "wait_quantity capacity example.com/null 4 5; echo done")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "done"
    args = (stubs / "kubectl.args").read_text()
    assert "get node t-worker -o jsonpath={.status.capacity.example\\.com/null}" in args


def test_wait_quantity_fails_with_what_it_saw_and_dumps_diagnostics(stubs: Path) -> None:
    """A value that never comes fails in time, says expected and last seen, and dumps logs."""
    (stubs / "kubectl.out").write_text("3")
    result = run_checks_snippet(stubs, "wait_quantity allocatable example.com/null 4 0.3")
    assert result.returncode == 1
    assert (
        "timed out after 0.3s waiting for: node t-worker allocatable example.com/null = 4"
        " (last seen: 3)" in result.stderr
    )
    assert "===== genericdp logs" in result.stderr
    assert (stubs / "artifacts" / "diagnostics.txt").is_file()


def test_absent_resource_counts_as_zero(stubs: Path) -> None:
    """A resource the node does not list yet reads as 0 (as a registered empty list does)."""
    result = run_checks_snippet(
        stubs, "quantity_is capacity example.com/e2e-hotplug 0 && echo zero"
    )
    assert result.stdout.strip() == "zero", result.stderr


def test_hold_for_fails_as_soon_as_the_condition_breaks(stubs: Path) -> None:
    """hold_for keeps checking over its window and fails when the condition stops holding."""
    snippet = "n=0; flaky() { n=$((n+1)); ((n < 3)); }; hold_for 5 'the old config' flaky"
    result = run_checks_snippet(stubs, snippet)
    assert result.returncode == 1
    assert "no longer true within 5s: the old config" in result.stderr


def kubelet_journal(times: dict[str, str]) -> str:
    line = (
        "{t} t-worker kubelet[99]: I1129 07:00:00.000000      99 server.go:144] "
        '"Got registration request from device plugin with resource" resourceName="{r}"'
    )
    return "\n".join(line.format(t=t, r=r) for r, t in times.items()) + "\n"


def test_registration_times_come_from_the_kubelet_journal(stubs: Path) -> None:
    """all_registered_since takes each resource's first registration after the socket appeared."""
    names = [r.name for r in load([BASE / "config.yaml", OVERLAY / "e2e.yaml"]).resources]
    times = {name: f"1000.{100 + i:06d}" for i, name in enumerate(names)}
    journal = kubelet_journal({"example.com/null": "999.000000"}) + kubelet_journal(times)
    (stubs / "docker.out").write_text(journal)
    result = run_checks_snippet(stubs, "all_registered_since 999.5; echo $REGISTERED_AT")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == max(times.values())
    assert (
        "journalctl -u kubelet --no-pager -o short-unix --since @999"
        in (stubs / "docker.args").read_text()
    )


def test_a_resource_missing_from_the_journal_is_not_registered(stubs: Path) -> None:
    """all_registered_since fails, naming the resource, while one has not registered again."""
    (stubs / "docker.out").write_text(kubelet_journal({"example.com/null": "1000.5"}))
    result = run_checks_snippet(stubs, 'all_registered_since 1000 || echo "waiting: $LAST_SEEN"')
    assert result.stdout.strip() == "waiting: no registration of example.com/zero yet"


def run_local_snippet(tmp_path: Path, snippet: str) -> subprocess.CompletedProcess[str]:
    """Source checks.sh for the local node (node-lib.sh, lib.sh), then run snippet."""
    env = {"PATH": os.environ["PATH"], "ARTIFACTS": str(tmp_path), "HOME": str(tmp_path)}
    script = f"set -euo pipefail\nsource {E2E_ROOT / 'checks.sh'} local\n{snippet}\n"
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def kubelet_json_log(tmp_path: Path, entries: list[tuple[float, str]]) -> None:
    """The local kubelet's JSON log: "ts" in milliseconds, as klog's JSON format writes it."""
    line = (
        '{{"ts":{ms:.3f},"caller":"v1beta1/server.go:161","msg":"Got registration request'
        ' from device plugin with resource","v":0,"resourceName":"{r}"}}'
    )
    logs = tmp_path / "node-logs"
    logs.mkdir(exist_ok=True)
    text = "\n".join(line.format(ms=t * 1000, r=r) for t, r in entries)
    (logs / "kubelet.log").write_text('{"ts":1000.0,"msg":"start"}\n' + text + "\n")


def test_local_registration_times_come_from_the_json_log_in_seconds(tmp_path: Path) -> None:
    """On the local node, all_registered_since reads the kubelet's JSON log (ms) as seconds."""
    names = [r.name for r in load([BASE / "config.yaml", OVERLAY / "e2e.yaml"]).resources]
    entries = [(1000.25, "example.com/null")]
    entries += [(1796115363.0 + i / 100, name) for i, name in enumerate(names)]
    kubelet_json_log(tmp_path, entries)
    result = run_local_snippet(tmp_path, "all_registered_since 1796115362.5; echo $REGISTERED_AT")
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == pytest.approx(1796115363.0 + (len(names) - 1) / 100)


def test_a_second_registration_with_one_kubelet_is_counted(tmp_path: Path) -> None:
    """registrations_since counts per resource, so a stale second Register is seen."""
    kubelet_json_log(
        tmp_path,
        [(2000.0, "example.com/null"), (2000.5, "example.com/zero"), (2001.0, "example.com/null")],
    )
    result = run_local_snippet(tmp_path, "registrations_since 1999")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["example.com/null 2", "example.com/zero 1"]


def test_percentile_is_nearest_rank(tmp_path: Path) -> None:
    """The p50 and max printed for the kubelet restarts come from every sample."""
    samples = tmp_path / "samples"
    samples.write_text("0.30\n0.10\n0.20\n0.90\n")
    result = run_local_snippet(
        tmp_path, f"percentile 50 {samples}; percentile 100 {samples}; percentile 0 {samples}"
    )
    assert result.stdout.split() == ["0.20", "0.90", "0.10"], result.stderr


@needs_kubectl
def test_the_base_configmap_names_no_path_of_this_repository() -> None:
    """What a user's cluster holds points at nothing only a checkout of the repository has."""
    (cm,) = (
        c
        for c in by_kind(kustomize(BASE), "ConfigMap")
        if c["metadata"]["name"] == "genericdp-config"
    )
    text = cm["data"]["config.yaml"]
    assert "../" not in text
    assert "genericdp schema" in text
