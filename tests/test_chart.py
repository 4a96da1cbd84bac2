"""The Helm chart's values schema, names, namespaces, pod labels and monitors.

Structural checks run everywhere (the schema with jsonschema, the templates
as text); rendering checks run once with Helm 3 and once with Helm 4, the
binaries e2e/local/npm-tools.sh puts in NPM_TOOLS_DIR (`./dev test` does).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from ruamel.yaml import YAML

from genericdp.config import schema as genericdp_schema
from tests.apiserver import ApiServer
from tests.npm_tools import helm_binary
from tools import chart_schema, versions

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "genericdp"
TEMPLATES = CHART / "templates"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "DeviceClass",
}
NAMESPACE_LINE = 'namespace: {{ include "genericdp.namespace" . }}'


def values() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe", pure=True).load((CHART / "values.yaml").read_text())
    return data


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return data


def schema_errors(data: dict[str, Any]) -> list[str]:
    """Every message, those under a oneOf's branches too."""
    pending = list(Draft202012Validator(schema()).iter_errors(data))
    messages = []
    while pending:
        error = pending.pop(0)
        messages.append(error.message)
        pending += error.context or []
    return messages


# -- values.schema.json -------------------------------------------------------------------


def test_the_schema_is_valid_and_accepts_the_default_values() -> None:
    """values.schema.json is a draft 2020-12 schema and values.yaml passes it."""
    Draft202012Validator.check_schema(schema())
    assert schema_errors(values()) == []


def test_the_schema_declares_every_value() -> None:
    """Each top-level key of values.yaml is in the schema, which is closed to typos."""
    assert schema()["additionalProperties"] is False
    assert set(values()) <= set(schema()["properties"])


def test_the_schema_patterns_are_re2() -> None:
    """Helm compiles patterns with Go's RE2: no lookarounds or backreferences (helm would fail)."""
    text = (CHART / "values.schema.json").read_text()
    patterns = re.findall(r'"pattern": "((?:[^"\\]|\\.)*)"', text)
    assert patterns
    for pattern in patterns:
        assert not re.search(r"\(\?<?[=!]|\\\\[1-9]", pattern), pattern


BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "a misspelt key": ({"toleration": []}, "Additional properties"),
    "a misspelt image key": ({"image": {"repository": "r", "pullpolicy": "Always"}}, "pullpolicy"),
    "an unknown pull policy": ({"image": {"repository": "r", "pullPolicy": "Sometimes"}}, ""),
    "a port out of range": ({"metricsPort": 0}, "minimum"),
    "a relative kubelet root": ({"kubeletRootDir": "var/lib/kubelet"}, "does not match"),
    "a config file genericdp would not read": ({"extraConfigFiles": {"notes.txt": "x"}}, ""),
    "a second config.yaml": ({"extraConfigFiles": {"config.yaml": "x"}}, ""),
    "an unknown log level": ({"logLevel": "verbose"}, ""),
    "a monitor switch as a string": ({"podMonitor": {"enabled": "yes"}}, "boolean"),
    "a digest that is not sha256": ({"image": {"repository": "r", "digest": "latest"}}, ""),
    "tolerations as a map": ({"tolerations": {"operator": "Exists"}}, "array"),
    "a misspelt config key": (
        {"config": {"version": "v1", "resources": [{"name": "a.io/x", "matches": []}]}},
        "'matches' was unexpected",
    ),
    "a resource name without a domain": (
        {"config": {"version": "v1", "resources": [{"name": "x", "match": [{"glob": "/d"}]}]}},
        "does not match",
    ),
    "a USB ID Helm read as a number": (
        {
            "config": {
                "version": "v1",
                "resources": [
                    {"name": "a.io/x", "match": [{"udev": {"attributes": {"idVendor": 259}}}]},
                ],
            }
        },
        "259 is not of type 'string'",
    ),
    "configYaml as a mapping": ({"configYaml": {"version": "v1"}}, "is not of type 'string'"),
}


@pytest.mark.parametrize("case", BAD_VALUES, ids=list(BAD_VALUES))
def test_the_schema_refuses(case: str) -> None:
    """Each kind of wrong value is an error at install time, not a silently ignored setting."""
    override, message = BAD_VALUES[case]
    errors = schema_errors({**values(), **override})
    assert errors, case
    assert message in "\n".join(errors)


def test_the_config_schema_in_the_values_schema_is_the_config_schema() -> None:
    """values.schema.json's config is exactly `genericdp schema` (python -m tools.chart_schema)."""
    assert chart_schema.main(["check"]) == 0, "run ./dev chart-schema"
    embedded = dict(schema()["properties"]["config"])
    embedded.pop("description")
    config = chart_schema.for_helm(genericdp_schema())
    assert embedded == {k: v for k, v in config.items() if k not in ("$schema", "description")}


@pytest.mark.parametrize(
    "item",
    [
        {"glob": "/dev/x"},
        {"udev": {"subsystem": "tty"}},
        {"glob": "/dev/x", "containerPath": "/dev/y"},
        {"glob": "/dev/x", "udev": {"subsystem": "tty"}},
        {},
        {"containerPath": "/dev/y"},
        {"glob": "/dev/x", "usb": 1},
        {"udev": {"attributes": {"idVendor": 259}}},
        "/dev/x",
    ],
)
def test_the_helm_form_of_the_config_schema_takes_the_same_configs(item: object) -> None:
    """for_helm rewrites the matcher's oneOf; the same match items pass and fail."""
    config = {"version": "v1", "resources": [{"name": "example.com/x", "match": [item]}]}
    original = Draft202012Validator(genericdp_schema())
    helm_form = Draft202012Validator(chart_schema.for_helm(genericdp_schema()))
    assert original.is_valid(config) == helm_form.is_valid(config)


def test_a_stale_values_schema_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """check fails, and write repairs, a values schema whose config lags the config schema."""
    stale = tmp_path / "values.schema.json"
    data = schema()
    del data["properties"]["config"]["$defs"]["udev"]
    stale.write_text(json.dumps(data, indent=2) + "\n")
    monkeypatch.setattr(chart_schema, "VALUES_SCHEMA", stale)
    monkeypatch.setattr(chart_schema, "ROOT", tmp_path)
    assert chart_schema.main(["check"]) == 1
    assert chart_schema.main(["write"]) == 0
    assert chart_schema.main(["check"]) == 0
    assert json.loads(stale.read_text()) == schema()


# -- templates, as text -----------------------------------------------------------------


def documents(path: Path) -> list[str]:
    return re.split(r"^---$", path.read_text(), flags=re.MULTILINE)


def test_every_namespaced_object_gets_the_namespace_helper() -> None:
    """Every object a template renders, unless cluster-scoped, has the namespace helper."""
    found = 0
    for path in sorted(TEMPLATES.glob("*.yaml")):
        for doc in documents(path):
            for kind in re.findall(r"^kind: (\w+)$", doc, re.MULTILINE):
                if kind in CLUSTER_SCOPED:
                    continue
                found += 1
                monitor = kind in ("PodMonitor", "ServiceMonitor")
                assert NAMESPACE_LINE in doc or (monitor and "$namespace" in doc), (
                    f"{path.name}: {kind} has no namespace"
                )
    assert found >= 6  # ConfigMap, DaemonSet, ServiceAccount, PodMonitor, Service, ServiceMonitor


def helper(name: str) -> str:
    text = (TEMPLATES / "_helpers.tpl").read_text()
    match = re.search(
        rf'{{{{- define "{re.escape(name)}" -}}}}\n(.*?)\n{{{{- end }}}}\n(?=\n|\Z|{{{{)',
        text,
        re.DOTALL,
    )
    assert match, name
    return match.group(1)


def test_names_and_namespace_take_their_overrides() -> None:
    """name, fullname and namespace helpers honour nameOverride, fullnameOverride and namespaceOverride."""  # noqa: E501
    assert ".Values.nameOverride" in helper("genericdp.name")
    assert ".Values.fullnameOverride" in helper("genericdp.fullname")
    assert ".Values.nameOverride" in helper("genericdp.fullname")
    namespace = helper("genericdp.namespace")
    assert ".Values.namespaceOverride" in namespace
    assert ".Release.Namespace" in namespace
    notes = (TEMPLATES / "NOTES.txt").read_text()
    assert ".Release.Namespace" not in notes, "NOTES must name the namespace the objects are in"


def test_the_pod_template_carries_no_version_labels() -> None:
    """The pod template's labels hold no chart or app version: a chart bump restarts nothing."""
    pod_labels = helper("genericdp.podLabels")
    assert "Version" not in pod_labels
    assert "helm.sh/chart" not in pod_labels
    assert "genericdp.labels" not in pod_labels
    daemonset = (TEMPLATES / "daemonset.yaml").read_text()
    template = daemonset.split("  template:\n", 1)[1].split("    spec:\n", 1)[0]
    assert 'include "genericdp.podLabels"' in template
    assert "genericdp.labels" not in template
    assert "Chart." not in template


# -- rendered -------------------------------------------------------------------------------


def test_the_dra_directories_follow_the_kubelet_root_dir_in_the_template() -> None:
    """backend=dra: plugins_registry/ and plugins/ under kubeletRootDir as the hostPath,
    the mount path and the GENERICDP_DRA_*_DIR value (the kubelet dials the socket at the
    path genericdp announces), as the kubelet-root-dir component does; checked as text
    here, rendered below where helm exists."""
    text = (TEMPLATES / "daemonset.yaml").read_text()
    assert "/var/lib/kubelet/plugins" not in text, "a DRA directory that ignores kubeletRootDir"
    assert '{{- $kubelet := trimSuffix "/" .Values.kubeletRootDir }}' in text
    for directory in ("plugins_registry", "plugins"):
        uses = re.findall(r"^ *(\S+): \{\{ \$kubelet \}\}/" + directory + "$", text, re.MULTILINE)
        assert sorted(uses) == ["mountPath", "path", "value"], directory
    dra_block = text[text.index("{{- if $dra }}") :]
    for variable in ("GENERICDP_DRA_REGISTRATION_DIR", "GENERICDP_DRA_PLUGINS_DIR"):
        assert f"- name: {variable}" in dra_block.split("{{- end }}")[0], variable


@pytest.fixture(params=["helm3", "helm4"])
def helm(request: pytest.FixtureRequest) -> Path:
    """Each Helm major version the chart supports."""
    return helm_binary(request.param)


def helm_template(helm: Path, chart: Path, *args: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(helm), "template", "gdp", str(chart), "--namespace", "devices", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in YAML(typ="safe", pure=True).load_all(result.stdout) if d]


def test_overrides_name_and_place_every_object(helm: Path) -> None:
    """fullnameOverride names every object; namespaceOverride places every namespaced one."""
    docs = helm_template(
        helm, CHART, "--set", "fullnameOverride=gdp-x", "--set", "namespaceOverride=hw",
        "--set", "podMonitor.enabled=true",
    )  # fmt: skip
    for doc in docs:
        if doc["kind"] not in CLUSTER_SCOPED:
            assert doc["metadata"]["namespace"] == "hw", doc["kind"]
        assert doc["metadata"]["name"].startswith("gdp-x"), doc["kind"]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == "gdp-x-config"
    assert pod["serviceAccountName"] == "gdp-x"
    default = helm_template(helm, CHART)
    namespaced = [d for d in default if d["kind"] not in CLUSTER_SCOPED]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"devices"}


def test_a_chart_bump_leaves_the_pod_template_unchanged(helm: Path, tmp_path: Path) -> None:
    """Rendering the chart at two versions gives the same pod template (no rolling restart)."""
    bumped = tmp_path / "genericdp"
    shutil.copytree(CHART, bumped)
    chart_yaml = bumped / "Chart.yaml"
    text = chart_yaml.read_text()
    for copy in versions.COPIES[:2]:
        text = copy.pattern.sub(lambda m: f"{m[1]}9.9.9{m[3]}", text)
    chart_yaml.write_text(text)
    before = helm_template(helm, CHART, "--set", "image.tag=pinned")
    after = helm_template(helm, bumped, "--set", "image.tag=pinned")
    (ds_before,) = [d for d in before if d["kind"] == "DaemonSet"]
    (ds_after,) = [d for d in after if d["kind"] == "DaemonSet"]
    assert ds_before["spec"]["template"] == ds_after["spec"]["template"]
    assert ds_before["metadata"]["labels"] != ds_after["metadata"]["labels"], "labels kept on top"


def test_monitors_render_and_select_the_pods(helm: Path) -> None:
    """podMonitor or serviceMonitor renders, selecting genericdp's pods on the metrics port."""
    docs = helm_template(helm, CHART, "--set", "podMonitor.enabled=true")
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    docs = helm_template(helm, CHART, "--set", "serviceMonitor.enabled=true")
    kinds = sorted(d["kind"] for d in docs)
    assert "ServiceMonitor" in kinds
    assert "Service" in kinds
    assert "PodMonitor" not in [d["kind"] for d in helm_template(helm, CHART)]


def test_both_monitors_is_an_error_and_the_schema_applies(helm: Path) -> None:
    """Both monitors at once fail with a reason; a misspelt value fails the render."""
    result = subprocess.run(
        [str(helm), "template", "gdp", str(CHART), "--set", "podMonitor.enabled=true",
         "--set", "serviceMonitor.enabled=true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "enable one" in result.stderr
    result = subprocess.run(
        [str(helm), "template", "gdp", str(CHART), "--set", "toleration[0].operator=Exists"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "toleration" in result.stderr


def test_the_dra_directories_move_with_the_kubelet_root_dir(helm: Path) -> None:
    """backend=dra, kubeletRootDir: the DRA directories at <root>/..., seen at their host paths."""
    root = "/var/lib/k0s/kubelet"
    objs = helm_template(helm, CHART, "--set", "backend=dra", "--set", f"kubeletRootDir={root}/")
    pod = next(o for o in objs if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    host = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    for volume, variable, path in (
        ("plugins-registry", "GENERICDP_DRA_REGISTRATION_DIR", f"{root}/plugins_registry"),
        ("plugins", "GENERICDP_DRA_PLUGINS_DIR", f"{root}/plugins"),
    ):
        assert (host[volume], mounts[volume], env[variable]) == (path, path, path)
    assert host["pod-resources"] == f"{root}/pod-resources"
    assert host["device-plugins"] == "/var/lib/kubelet/device-plugins"


def test_a_digest_wins_over_the_tag(helm: Path) -> None:
    """image.digest deploys repository@digest, what a verified signature covers."""
    digest = "sha256:" + "0" * 64
    docs = helm_template(helm, CHART, "--set", f"image.digest={digest}")
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/genericdp/genericdp@{digest}"


def test_the_dra_backend_renders_the_kustomize_components_objects(helm: Path) -> None:
    """backend=dra: the env, mounts, token, RBAC, admission policy and the same
    DeviceClasses as `genericdp deviceclasses` (and the kustomize component)."""
    objs = helm_template(helm, CHART, "--set", "backend=dra")
    kinds = [o["kind"] for o in objs]
    for kind in ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy"):
        assert kind in kinds
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert {"name": "GENERICDP_BACKEND", "value": "dra"} in pod["containers"][0]["env"]
    uid = {"name": "GENERICDP_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
    assert uid in pod["containers"][0]["env"]
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert ds["spec"]["updateStrategy"] == rolling
    # The last good config is kept on the node for the DRA backend too.
    assert {"name": "GENERICDP_STATE_DIR", "value": "/var/lib/genericdp"} in pod["containers"][0][
        "env"
    ]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["hostPath"] == {"path": "/var/lib/genericdp", "type": "DirectoryOrCreate"}
    policy = next(o for o in objs if o["kind"] == "ValidatingAdmissionPolicy")
    assert policy["spec"]["matchConditions"][0]["expression"] == (
        'request.userInfo.username == "system:serviceaccount:devices:gdp-genericdp"'
    )
    # The reconciler makes the classes: the chart renders none, and the same
    # Deployment and RBAC as the kustomize component.
    assert "DeviceClass" not in kinds
    component = ROOT / "deploy" / "kustomize" / "components" / "dra" / "reconciler.yaml"
    shipped = [d for d in YAML(typ="safe", pure=True).load_all(component.read_text()) if d]
    for kind in ("ClusterRole", "Role"):
        (ours,) = [
            o for o in objs if o["kind"] == kind and "deviceclasses" in o["metadata"]["name"]
        ]
        (theirs,) = [d for d in shipped if d["kind"] == kind]
        assert ours["rules"] == theirs["rules"], kind
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    (kustomized,) = [d for d in shipped if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == kustomized["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"name": "GENERICDP_DRA_DRIVER_NAME", "value": "genericdp.io"} in container["env"]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == (
        "gdp-genericdp-deviceclasses"
    )
    daemon_selector = next(o for o in objs if o["kind"] == "DaemonSet")["spec"]["selector"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert not daemon_selector["matchLabels"].items() <= labels.items()
    # Without it: the classes of `genericdp deviceclasses`, rendered by the chart.
    off = helm_template(
        helm, CHART, "--set", "backend=dra", "--set", "dra.classReconciler.enabled=false"
    )
    assert "Deployment" not in [o["kind"] for o in off]
    base_config = ROOT / "deploy" / "kustomize" / "base" / "config.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "genericdp", "deviceclasses", str(base_config)],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = [d for d in YAML(typ="safe", pure=True).load_all(done.stdout) if d]
    rendered = [o for o in off if o["kind"] == "DeviceClass"]
    assert [(c["metadata"]["name"], c["spec"]) for c in rendered] == [
        (c["metadata"]["name"], c["spec"]) for c in printed
    ]
    plain = helm_template(helm, CHART)
    assert "DeviceClass" not in [o["kind"] for o in plain]
    plain_ds = next(o for o in plain if o["kind"] == "DaemonSet")
    plain_pod = plain_ds["spec"]["template"]["spec"]
    assert plain_pod["automountServiceAccountToken"] is True  # rbac.nodes
    assert "GENERICDP_POD_UID" not in {e["name"] for e in plain_pod["containers"][0]["env"]}
    assert plain_ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1}


def test_rbac_nodes_renders_the_base_role_or_nothing(helm: Path) -> None:
    """rbac.nodes (the default): the kustomize base's read-only nodes role, bound to the
    release's ServiceAccount; false: no role, and no token for the device-plugin pod."""
    objs = helm_template(helm, CHART)
    role = next(o for o in objs if o["kind"] == "ClusterRole")  # the only one: device-plugin
    base = ROOT / "deploy" / "kustomize" / "base" / "rbac.yaml"
    shipped = next(d for d in YAML(typ="safe", pure=True).load_all(base.read_text()) if d)
    assert role["rules"] == shipped["rules"]
    binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gdp-genericdp", "namespace": "devices"}
    ]
    off = helm_template(helm, CHART, "--set", "rbac.nodes=false")
    assert not {"ClusterRole", "ClusterRoleBinding"} & {o["kind"] for o in off}
    pod = next(o for o in off if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False


UNQUOTED_IDS = """\
config:
  version: v1
  resources:
    - name: example.com/serial
      match:
        - udev: {subsystem: tty, attributes: {idVendor: 0403, idProduct: 6001}}
"""
AS_TEXT = """\
config: null
configYaml: |
  version: v1
  resources:
    - name: example.com/serial
      match:
        - udev: {subsystem: tty, attributes: {idVendor: "0403", idProduct: "6001"}}
"""


def helm_run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)


def test_unquoted_usb_ids_fail_helm_lint_with_their_path(
    helm: Path, tmp_path: Path, apiserver: ApiServer
) -> None:
    """idVendor: 0403 (259 to Helm) fails lint and install --dry-run, naming the value."""
    values = tmp_path / "values.yaml"
    values.write_text(UNQUOTED_IDS)
    lint = helm_run(helm, "lint", str(CHART), "-f", str(values))
    assert lint.returncode != 0
    for id_name in ("idVendor", "idProduct"):
        path = f"resources.0.match.0.udev.attributes.{id_name}"
        assert path in lint.stdout or "/" + path.replace(".", "/") in lint.stdout, lint.stdout
    # The real error first: the type at the value's path, not the matcher's other
    # form's missing and unknown keys (glob, udev).
    errors = [line for line in lint.stdout.splitlines() if line.lstrip().startswith(("[E", "-"))]
    # (Helm 4 heads two errors of one object with the object's path.)
    assert ".udev.attributes" in errors[0] or "/udev/attributes" in errors[0], lint.stdout
    assert re.search(r"want string|Expected: string", "\n".join(errors[:2])), lint.stdout
    assert "glob" not in lint.stdout, lint.stdout
    assert "oneOf" not in lint.stdout, lint.stdout
    install = helm_run(
        helm, "install", "gdp", str(CHART), "--dry-run=server", "-f", str(values),
        "--kubeconfig", str(apiserver.kubeconfig), "--namespace", "default",
    )  # fmt: skip
    assert install.returncode != 0
    assert "idVendor" in install.stderr


def test_the_config_as_text_reaches_the_configmap_as_written(helm: Path, tmp_path: Path) -> None:
    """configYaml is config.yaml byte for byte (quotes kept), lints clean, and names the classes."""
    values = tmp_path / "values.yaml"
    values.write_text(AS_TEXT)
    assert helm_run(helm, "lint", str(CHART), "-f", str(values)).returncode == 0
    docs = helm_template(
        helm, CHART, "-f", str(values), "--set", "backend=dra",
        "--set", "dra.classReconciler.enabled=false",
    )  # fmt: skip
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap"]
    written = YAML(typ="safe", pure=True).load(AS_TEXT)["configYaml"]
    assert configmap["data"] == {"config.yaml": written}
    classes = [d["spec"]["extendedResourceName"] for d in docs if d["kind"] == "DeviceClass"]
    assert classes == ["example.com/serial"]


def test_no_config_at_all_is_refused_at_render(helm: Path) -> None:
    """--set config=null with nothing else fails the render instead of an empty ConfigMap."""
    result = helm_run(helm, "template", "gdp", str(CHART), "--set", "config=null")
    assert result.returncode != 0
    assert "no config to serve" in result.stderr
    only_extra = helm_template(
        helm, CHART, "--set", "config=null", "--set", "extraConfigFiles.a\\.yaml=version: v1"
    )
    (configmap,) = [d for d in only_extra if d["kind"] == "ConfigMap"]
    assert list(configmap["data"]) == ["a.yaml"]


def test_config_yaml_that_is_not_a_mapping_is_refused(helm: Path) -> None:
    """configYaml that does not parse as a mapping fails the render, saying so."""
    result = helm_run(helm, "template", "gdp", str(CHART), "--set", "configYaml=[1]")
    assert result.returncode != 0
    assert "configYaml is not a YAML mapping" in result.stderr


def test_the_daemonset_stays_on_linux_and_its_tolerations_can_be_narrowed(helm: Path) -> None:
    """kubernetes.io/os: linux whatever nodeSelector says; a tolerations list replaces the
    default (every NoSchedule taint and CriticalAddonsOnly, no NoExecute taint)."""

    def pod(*args: str) -> dict[str, Any]:
        docs = helm_template(helm, CHART, *args)
        (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
        spec: dict[str, Any] = ds["spec"]["template"]["spec"]
        return spec

    default = pod()
    assert default["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert default["tolerations"] == [
        {"operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
    ]
    chosen = pod(
        "--set", "nodeSelector.disk=ssd", "--set", "nodeSelector.kubernetes\\.io/os=windows",
        "--set", "tolerations[0].key=nvidia.com/gpu", "--set", "tolerations[0].operator=Exists",
        "--set", "tolerations[0].effect=NoSchedule",
    )  # fmt: skip
    assert chosen["nodeSelector"] == {"disk": "ssd", "kubernetes.io/os": "linux"}
    assert chosen["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_an_unquoted_usb_id_in_config_yaml_fails_the_render(helm: Path, tmp_path: Path) -> None:
    """configYaml is text the schema cannot read: the template refuses a udev value YAML
    reads as a number (helm template and install; helm lint lets templates' fail pass)."""
    values = tmp_path / "values.yaml"
    values.write_text(
        "configYaml: |\n  version: v1\n  resources:\n    - name: example.com/serial\n"
        "      match: [{udev: {subsystem: tty, attributes: {idVendor: 0403}}}]\n"
    )
    rendered = helm_run(helm, "template", "gdp", str(CHART), "-f", str(values))
    assert rendered.returncode != 0
    assert (
        "configYaml: resources[0].match[0].udev.attributes.idVendor is 259, not a string"
        in rendered.stderr
    ), rendered.stderr
    values.write_text(values.read_text().replace("0403", '"0403"'))
    rendered = helm_run(helm, "template", "gdp", str(CHART), "-f", str(values))
    assert rendered.returncode == 0, rendered.stderr
