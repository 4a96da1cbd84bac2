"""Loading configs: files, directories (ConfigMap layout), the model produced,
and every problem of every file reported at once, never a traceback."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from genericdp.config import load, load_text
from genericdp.config.model import (
    AllocateSpec,
    Config,
    Exec,
    GlobMatcher,
    GroupBy,
    HealthCheck,
    Hooks,
    MountTemplate,
    PreferredAllocation,
    ResourceDefinition,
    Source,
    UdevMatcher,
    frozen_map,
)
from genericdp.config.templates import CompiledTemplates
from genericdp.errors import ConfigError, ConfigIssue

FULL = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - glob: /dev/ttyUSB*
      - udev:
          subsystem: tty
          kernel: "ttyACM*"
          driver: cdc_acm
          attributes: {idVendor: "2341", idProduct: "0043"}
          properties: {ID_SERIAL_SHORT: "A1*"}
    groupBy: parent:usb
    count: 4
    permissions: wmr
    health:
      exec: [/usr/bin/test, -c, /dev/ttyUSB0]
      interval: 1m30s
      timeout: 1.5s
      failureThreshold: 5
    hooks:
      init: {exec: [stty, -F, /dev/ttyUSB0], timeout: 300ms}
      preStart: {exec: [/usr/local/bin/reset-dongle]}
      cleanup: {exec: [/usr/local/bin/scrub], timeout: 2h}
    allocate:
      env:
        SERIAL_PORTS: "{{ devices | map(attribute='path') | join(',') }}"
        my.var: "{{ resource }}"
      mounts:
        - {hostPath: /run/foo, containerPath: /run/foo, readOnly: true}
        - {hostPath: "{{ node_name }}/x", containerPath: /x}
      annotations:
        example.com/units: "{{ units | map(attribute='id') | join(',') }}"
    preferredAllocation: spread
  - name: example.com/gpu
    match: [{glob: /dev/dri/renderD*}]
    groupBy: {pathRegex: "renderD(?P<key>[0-9]+)"}
"""

MINIMAL = """\
version: v1
resources:
  - name: example.com/{name}
    match:
      - glob: /dev/{name}*
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _issues(paths: list[Path]) -> tuple[ConfigIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load(paths)
    return caught.value.issues


def test_full_featured_config_becomes_the_exact_model(tmp_path: Path) -> None:
    """Every key of a valid config lands in the frozen model, durations in seconds."""
    config = load([_write(tmp_path / "full.yaml", FULL)])
    serial = ResourceDefinition(
        name="example.com/serial",
        match=(
            GlobMatcher("/dev/ttyUSB*"),
            UdevMatcher(
                subsystem="tty",
                kernel="ttyACM*",
                driver="cdc_acm",
                attributes=frozen_map({"idVendor": "2341", "idProduct": "0043"}),
                properties=frozen_map({"ID_SERIAL_SHORT": "A1*"}),
            ),
        ),
        group_by=GroupBy("parent", subsystem="usb"),
        count=4,
        permissions="rwm",
        health=HealthCheck(
            exec=Exec(("/usr/bin/test", "-c", "/dev/ttyUSB0"), 1.5),
            interval=90.0,
            failure_threshold=5,
        ),
        hooks=Hooks(
            init=Exec(("stty", "-F", "/dev/ttyUSB0"), 0.3),
            pre_start=Exec(("/usr/local/bin/reset-dongle",), 10.0),
            cleanup=Exec(("/usr/local/bin/scrub",), 7200.0),
        ),
        allocate=AllocateSpec(
            env=frozen_map(
                {
                    "SERIAL_PORTS": "{{ devices | map(attribute='path') | join(',') }}",
                    "my.var": "{{ resource }}",
                }
            ),
            mounts=(
                MountTemplate("/run/foo", "/run/foo", read_only=True),
                MountTemplate("{{ node_name }}/x", "/x", read_only=False),
            ),
            annotations=frozen_map(
                {"example.com/units": "{{ units | map(attribute='id') | join(',') }}"}
            ),
        ),
        preferred_allocation=PreferredAllocation.SPREAD,
    )
    gpu = ResourceDefinition(
        name="example.com/gpu",
        match=(GlobMatcher("/dev/dri/renderD*"),),
        group_by=GroupBy("pathRegex", pattern="renderD(?P<key>[0-9]+)"),
    )
    assert config == Config((serial, gpu))
    assert config.files == (str(tmp_path / "full.yaml"),)
    assert [r.source for r in config.resources] == [
        Source(str(tmp_path / "full.yaml"), 3),
        Source(str(tmp_path / "full.yaml"), 34),
    ]
    assert all(isinstance(r.templates, CompiledTemplates) for r in config.resources)


def test_defaults_are_applied() -> None:
    """Omitted keys take the documented defaults."""
    (definition,) = load_text(MINIMAL.format(name="a")).resources
    assert definition.group_by == GroupBy("node")
    assert (definition.count, definition.permissions) == (1, "rw")
    assert definition.preferred_allocation is PreferredAllocation.PACKED
    assert (definition.health, definition.hooks, definition.allocate) == (
        None,
        Hooks(),
        AllocateSpec(),
    )
    text = (
        MINIMAL.format(name="b") + "    health: {exec: [probe]}\n    hooks: {init: {exec: [x]}}\n"
    )
    (probed,) = load_text(text).resources
    assert probed.health == HealthCheck(Exec(("probe",), 3.0), interval=10.0, failure_threshold=3)
    assert probed.hooks.init == Exec(("x",), 10.0)


def test_yaml_merge_keys_are_followed() -> None:
    """Shared sections via anchors and merge keys load like written-out ones."""
    text = """\
version: v1
resources:
  - &serial
    name: example.com/a
    match: [{glob: /dev/ttyUSB*}]
    hooks: {cleanup: {exec: [/usr/local/bin/scrub]}}
  - <<: *serial
    name: example.com/b
"""
    first, second = load_text(text).resources
    assert second.hooks == first.hooks
    assert second.name == "example.com/b"


def test_directory_takes_yaml_and_yml_sorted_by_name(tmp_path: Path) -> None:
    """A directory yields its *.yaml and *.yml files in name order, nothing else."""
    _write(tmp_path / "b.yml", MINIMAL.format(name="b"))
    _write(tmp_path / "a.yaml", MINIMAL.format(name="a"))
    _write(tmp_path / "c.json", "not yaml at all: [")
    _write(tmp_path / "README", "not yaml at all: [")
    _write(tmp_path / "sub" / "d.yaml", MINIMAL.format(name="d"))
    config = load([tmp_path])
    assert [r.name for r in config.resources] == ["example.com/a", "example.com/b"]
    assert config.files == (str(tmp_path / "a.yaml"), str(tmp_path / "b.yml"))


def test_configmap_volume_layout(tmp_path: Path) -> None:
    """A ConfigMap volume (keys linked through ..data to a timestamped dir) loads each key once."""
    volume = tmp_path / "config"
    stamp = volume / "..2024_01_01_00_00_00.123456789"
    _write(stamp / "serial.yaml", MINIMAL.format(name="serial"))
    _write(stamp / "gpu.yml", MINIMAL.format(name="gpu"))
    os.symlink(stamp.name, volume / "..data")
    for key in ("serial.yaml", "gpu.yml"):
        os.symlink(f"..data/{key}", volume / key)
    config = load([volume])
    assert [r.name for r in config.resources] == ["example.com/gpu", "example.com/serial"]
    assert config.files == (str(volume / "gpu.yml"), str(volume / "serial.yaml"))


def test_duplicate_names_across_files_point_at_the_second(tmp_path: Path) -> None:
    """A name defined in two files is reported at the second, naming the first's file:line."""
    first = _write(tmp_path / "a.yaml", MINIMAL.format(name="serial"))
    second = _write(tmp_path / "b.yaml", "# a comment\n" + MINIMAL.format(name="serial"))
    (issue,) = _issues([tmp_path])
    assert (issue.file, issue.line, issue.column) == (str(second), 4, 11)
    assert issue.path == "resources[0].name"
    assert f"already defined at {first}:3" in issue.message


def test_every_problem_of_a_file_is_reported_in_order(tmp_path: Path) -> None:
    """A file with three defects yields three issues, sorted by position."""
    text = """\
version: v1
resources:
  - name: kubernetes.io/serial
    match:
      - glob: ttyUSB*
    colour: blue
"""
    issues = _issues([_write(tmp_path / "three.yaml", text)])
    assert [(i.line, i.path) for i in issues] == [
        (3, "resources[0].name"),
        (5, "resources[0].match[0].glob"),
        (6, "resources[0].colour"),
    ]


def test_problems_of_all_files_come_in_one_error(tmp_path: Path) -> None:
    """Several paths are checked fully; one ConfigError lists the issues of each."""
    bad_a = _write(tmp_path / "a.yaml", "version: v2\n" + MINIMAL.format(name="a")[12:])
    bad_b = _write(tmp_path / "dir" / "b.yaml", MINIMAL.format(name="b") + "    count: 0\n")
    issues = _issues([bad_a, tmp_path / "dir", tmp_path / "missing.yaml"])
    assert [i.file for i in issues] == [str(bad_a), str(bad_b), str(tmp_path / "missing.yaml")]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p.mkdir(), "no *.yaml or *.yml files in this directory"),
        (lambda _p: None, "does not exist"),
        (lambda p: p.write_text(""), "is empty"),
        (lambda p: p.write_text("  \n\n"), "is empty"),
        (lambda p: p.write_bytes(b"version: v1\nname: \xff\xfe\n"), "is not UTF-8 text"),
        (lambda p: os.symlink(p.parent / "nowhere", p), "broken symbolic link"),
    ],
    ids=["empty-dir", "missing", "empty-file", "blank-file", "not-utf8", "broken-link"],
)
def test_unusable_paths_are_clear_issues(tmp_path: Path, setup: object, message: str) -> None:
    """A path that cannot be a config yields one issue naming it."""
    path = tmp_path / "config.yaml"
    assert callable(setup)
    setup(path)
    (issue,) = _issues([path])
    assert issue.file == str(path)
    assert message in issue.message


def test_broken_key_link_in_a_directory_is_reported(tmp_path: Path) -> None:
    """A ConfigMap key whose link target vanished is an issue, not a silent skip."""
    os.symlink(tmp_path / "..data" / "gone.yaml", tmp_path / "gone.yaml")
    (issue,) = _issues([tmp_path])
    assert issue.file == str(tmp_path / "gone.yaml")
    assert "cannot be read" in issue.message


def test_load_text_names_the_file_in_messages() -> None:
    """load_text reports issues under the given file name."""
    with pytest.raises(ConfigError) as caught:
        load_text("version: v1\nresources: []\n", filename="inline.yaml")
    assert str(caught.value).startswith("inline.yaml:2:12: resources:")


def test_schema_errors_are_located_where_they_are() -> None:
    """A schema problem of a plain config is said at its file, line and column."""
    text = "version: v1\nresources:\n  - name: example.com/a\n    match: [{glob: /dev/null}]\n"
    text += "    count: zero\n"
    with pytest.raises(ConfigError) as caught:
        load_text(text, "c.yaml")
    (issue,) = caught.value.issues
    assert (issue.line, issue.column, issue.path) == (5, 12, "resources[0].count")


def test_template_problems_are_located_at_their_values() -> None:
    """Each template that does not compile is reported at its own value."""
    text = MINIMAL.format(name="a") + textwrap.indent(
        textwrap.dedent("""\
        allocate:
          env: {A: "{{ nope }}", B: "{{ units }}"}
          mounts:
            - {hostPath: "{{ 1 + }}", containerPath: /x}
          annotations: {example.com/x: "{% for %}"}
        """),
        "    ",
    )
    with pytest.raises(ConfigError) as caught:
        load_text(text)
    assert [(i.line, i.path) for i in caught.value.issues] == [
        (7, "resources[0].allocate.env.A"),
        (9, "resources[0].allocate.mounts[0].hostPath"),
        (10, 'resources[0].allocate.annotations["example.com/x"]'),
    ]
    assert "unknown name 'nope'" in caught.value.issues[0].message


@pytest.mark.parametrize(
    "text",
    [
        "[" * 600 + "]" * 600,
        "version: v1\nresources: &r [*r]\n",
        "version: v1\nresources: !!binary aGVsbG8=\n",
        "version: v1\nresources: !!set {a, b}\n",
        "version: v1\nresources: [{name: !!float .nan, match: [{glob: !!int 1}]}]\n",
        "? [a, b]\n: c\n",
        "version: v1\nresources:\n  - {name: example.com/a, match: [{udev: {attributes: [1]}}]}\n",
        "%YAML 1.1\n---\nversion: v1\nresources: [{name: example.com/a, match: yes}]\n",
        "\t\x00\x01",
        (
            "version: v1\nresources:\n  - name: example.com/a\n    match: [{glob: /dev/x}]\n"
            "    count: .inf\n"
        ),
        (
            "version: v1\nresources:\n  - name: example.com/a\n    match: [{glob: /dev/x}]\n"
            "    groupBy: {pathRegex: 1}\n    health: {exec: [1], interval: [], timeout: {}}\n"
        ),
    ],
)
def test_odd_input_never_raises_anything_but_config_error(text: str) -> None:
    """Whatever a file holds, the result is a Config or a ConfigError with located issues."""
    with pytest.raises(ConfigError) as caught:
        load_text(text, "odd.yaml")
    assert caught.value.issues
    assert all(i.file == "odd.yaml" and i.message for i in caught.value.issues)
