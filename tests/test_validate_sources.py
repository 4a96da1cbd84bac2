"""`genericdp validate` on config carried in other files: a Helm values file
(--helm-values) and a rendered manifest, with every problem at its line there."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.npm_tools import helm_binary
from tests.test_cli import run

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "genericdp"

UNQUOTED = """\
config:
  version: v1
  resources:
    - name: example.com/serial
      match:
        - udev: {subsystem: tty, attributes: {idVendor: 0403}}
    - name: nodomain
      matches: []
"""

AS_TEXT = """\
logLevel: debug
config: null
configYaml: |
  version: v1
  resources:
    - name: example.com/serial
      match:
        - udev: {subsystem: tty, attributes: {idVendor: "0403", idProduct: 6001}}
"""

WITH_EXTRA = """\
config:
  version: v1
  resources:
    - name: example.com/null
      match: [{glob: /dev/null}]
extraConfigFiles:
  more.yaml: |
    version: v1
    resources:
      - name: example.com/null
        match: [{glob: /dev/zero}]
"""

MANIFEST = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: gdp}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: gdp-config
  namespace: devices
data:
  notes.txt: not a config
  config.yaml: |
    version: v1
    resources:
      - name: example.com/null
        match: [{glob: /dev/null}]
        count: unbounded
      - name: example.com/zero
        match: [{glob: /dev/zero}]
        count: -1
"""


def test_helm_values_problems_are_at_their_lines_in_the_values_file(tmp_path: Path) -> None:
    """Unquoted IDs, a name without a domain and a typo: exit 1, each at values.yaml:line:col."""
    values = tmp_path / "values.yaml"
    values.write_text(UNQUOTED)
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert (
        f"error: {values}:6:57: config.resources[0].match[0].udev.attributes.idVendor:"
        ' must be a string: quote it, e.g. "0403"'
    ) in "\n".join(lines)
    assert any(line.startswith(f"error: {values}:7:") and "nodomain" in line for line in lines)
    assert any(f"{values}:8:7: config.resources[1].matches" in line for line in lines)


def test_config_yaml_is_checked_as_written(tmp_path: Path) -> None:
    """configYaml wins over config; its problems are at the values file's lines."""
    values = tmp_path / "values.yaml"
    values.write_text(AS_TEXT)
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 1
    assert f"{values}:8:76: configYaml: resources[0].match[0].udev.attributes.idProduct" in (
        result.stderr
    )
    values.write_text(AS_TEXT.replace("idProduct: 6001", 'idProduct: "6001"'))
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 0, result.stderr
    assert f"example.com/serial  ({values}:6)" in result.stdout


def test_extra_config_files_are_checked_with_the_config(tmp_path: Path) -> None:
    """config and extraConfigFiles are one directory to the pod: a name in both is an error."""
    values = tmp_path / "values.yaml"
    values.write_text(WITH_EXTRA)
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 1
    assert "example.com/null" in result.stderr
    assert f"{values}:10:" in result.stderr


def test_the_charts_own_values_validate() -> None:
    """The chart's values.yaml, as a values file: its demo config, at values.yaml's lines."""
    values = CHART / "values.yaml"
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 0, result.stderr
    assert f"ok: 4 resource(s) in {values} (config)" in result.stdout
    assert f"example.com/null  ({values}:" in result.stdout


def test_a_values_file_without_config_says_so(tmp_path: Path) -> None:
    """Nothing to check is an error, not an ok; a values file given as a config gets a hint."""
    values = tmp_path / "values.yaml"
    values.write_text("logLevel: debug\n")
    result = run("validate", "--helm-values", str(values))
    assert result.returncode == 1
    assert "has no config, configYaml or extraConfigFiles" in result.stderr
    values.write_text(UNQUOTED)
    result = run("validate", str(values))
    assert result.returncode == 1
    assert f"note: {values} looks like a Helm values file: use --helm-values" in result.stderr
    assert run("validate").returncode == 2


def test_a_manifest_checks_each_configmaps_config_files(tmp_path: Path) -> None:
    """A multi-document manifest: each ConfigMap's *.yaml keys, at the manifest's lines."""
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(MANIFEST)
    result = run("validate", str(manifest))
    assert result.returncode == 1
    assert (
        f"{manifest}:20:16: ConfigMap devices/gdp-config data.config.yaml: resources[1].count"
        in (result.stderr)
    )
    manifest.write_text(MANIFEST.replace("count: -1", "count: 2"))
    result = run("validate", str(manifest))
    assert result.returncode == 0, result.stderr
    assert "ok: 2 resource(s) in" in result.stdout
    manifest.write_text(MANIFEST.split("---", maxsplit=1)[0])
    result = run("validate", str(manifest))
    assert result.returncode == 1
    assert "has no ConfigMap with *.yaml or *.yml data" in result.stderr


def test_the_rendered_chart_validates(tmp_path: Path) -> None:
    """`helm template` output with a configYaml: validate reads its ConfigMap as the pod will.

    The chart itself refuses the unquoted ID; the manifest is rendered with it
    quoted, and then unquoted in the rendered ConfigMap, as a tool that edits
    manifests after Helm would leave it."""
    values = tmp_path / "values.yaml"
    values.write_text(AS_TEXT)
    helm = [str(helm_binary("helm4")), "template", "gdp", str(CHART), "-f", str(values)]
    refused = subprocess.run(helm, capture_output=True, text=True, check=False)
    assert refused.returncode != 0
    assert "idProduct" in refused.stderr, refused.stderr
    values.write_text(AS_TEXT.replace("idProduct: 6001", 'idProduct: "6001"'))
    rendered = subprocess.run(helm, capture_output=True, text=True, check=True)
    assert 'idProduct: "6001"' in rendered.stdout
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(rendered.stdout.replace('idProduct: "6001"', "idProduct: 6001"))
    result = run("validate", str(manifest))
    assert result.returncode == 1
    assert "idProduct: must be a string" in result.stderr
    assert f"{manifest}:" in result.stderr
