"""Templates read only fields that exist: a typo such as ``devices[0].pth`` is a
validation error with its position and the record's fields, in every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from genericdp.allocation.render import template_context
from genericdp.config import load
from genericdp.config.templatefields import ALLOCATE_CONTEXT, NODE_CONTEXT, ListOf, Record
from genericdp.discovery import discover
from genericdp.discovery.containerpaths import node_context
from genericdp.discovery.model import Roots
from genericdp.errors import ConfigError
from tests.fakesys import FakeHost

CONFIG = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - udev: {{subsystem: tty, kernel: "ttyUSB*"}}
    allocate:
      env:
        PORT: "{template}"
"""


def _load(tmp_path: Path, template: str) -> ConfigError | None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(template=template))
    try:
        load([cfg])
    except ConfigError as exc:
        return exc
    return None


@pytest.mark.parametrize(
    ("template", "field", "suggestion"),
    [
        ("{{ devices[0].pth }}", "pth", "path"),
        ("{{ devices[0]['host_pth'] }}", "host_pth", "host_path"),
        ("{% for u in units %}{{ u.nodes[0].minr }}{% endfor %}", "minr", "minor"),
        ("{{ units[0].idd }}", "idd", "id"),
        ("{{ devices | map(attribute='unit_idd') | join(',') }}", "unit_idd", "unit_id"),
        ("{{ (devices | first).subsytem }}", "subsytem", "subsystem"),
    ],
)
def test_an_unknown_field_is_a_validation_error_with_the_fields(
    tmp_path: Path, template: str, field: str, suggestion: str
) -> None:
    """The error names the file, line, column, key path, the field and the valid ones."""
    exc = _load(tmp_path, template)
    assert exc is not None, template
    (issue,) = exc.issues
    assert (issue.line, issue.column) == (8, 15)
    assert issue.path == "resources[0].allocate.env.PORT"
    assert f"no field {field!r}" in issue.message
    assert f"did you mean {suggestion!r}" in issue.message
    assert "(fields: " in issue.message


@pytest.mark.parametrize(
    "template",
    [
        "{{ devices[0].path }}{{ devices[0].attributes.anything }}{{ units[0].properties['X'] }}",
        "{{ devices | map(attribute='attributes.serial') | join(',') }}",
        "{% for d in devices %}{{ d.items() | list }}{% endfor %}",
        "{% set devices = [1] %}{{ devices.whatever }}",
        "{% for k, v in devices[0].attributes.items() %}{{ k.x }}{% endfor %}",
        "{{ device_ids | join(',') }}{{ units[1:][0].nodes[0].unit_id }}",
    ],
)
def test_fields_that_exist_and_lookups_not_followed_pass(tmp_path: Path, template: str) -> None:
    """Real fields, free-form attributes, dict methods and reassigned names are accepted."""
    assert _load(tmp_path, template) is None


def test_a_container_path_template_sees_a_devices_fields(tmp_path: Path) -> None:
    """A node's containerPath is checked against ``device``'s own fields (it has ``name``)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/kvm\n    match:\n"
        '      - glob: /dev/kvm\n        containerPath: "/dev/{{ device.nme }}"\n'
    )
    with pytest.raises(ConfigError) as caught:
        load([cfg])
    (issue,) = caught.value.issues
    assert issue.path == "resources[0].match[0].containerPath"
    assert "no field 'nme'" in issue.message
    assert "did you mean 'name'" in issue.message


def _fields(shape: Record | ListOf | None) -> set[str]:
    assert isinstance(shape, ListOf)
    assert isinstance(shape.item, Record)
    return set(shape.item.fields)


def test_the_listed_fields_are_the_ones_templates_see(tmp_path: Path) -> None:
    """The check's fields are the keys of the contexts the renderers build."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="A1", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(template="{{ devices[0].path }}"))
    (definition,) = load([cfg]).resources
    units = discover(definition, Roots(dev=host.dev, sys=host.sys, udev=host.udev))
    context = template_context(definition, units, "n1", ["x"])
    assert set(context) == set(ALLOCATE_CONTEXT)
    units_shape = ALLOCATE_CONTEXT["units"]
    assert set(context["units"][0]) == _fields(units_shape)
    assert set(context["devices"][0]) == _fields(ALLOCATE_CONTEXT["devices"])
    assert isinstance(units_shape, ListOf)
    assert isinstance(units_shape.item, Record)
    assert set(context["units"][0]["nodes"][0]) == _fields(units_shape.item.fields["nodes"])
    device = NODE_CONTEXT["device"]
    assert isinstance(device, Record)
    assert set(node_context(units[0].nodes[0])) == set(device.fields)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "genericdp", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["validate", "discover", "simulate"])
def test_every_command_refuses_a_field_typo_with_its_position(tmp_path: Path, command: str) -> None:
    """validate, discover and simulate --allocate all exit 1 at file:line:column."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="A1", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG.format(template="{{ devices[0].pth }}"))
    extra = {
        "validate": [],
        "discover": host.root_flags(),
        "simulate": [*host.root_flags(), "--allocate", "example.com/serial=1", "--once"],
    }[command]
    done = _run(command, str(cfg), *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{cfg}:8:15: resources[0].allocate.env.PORT:" in done.stderr
    assert "did you mean 'path'" in done.stderr
    assert "would fail" not in done.stdout
