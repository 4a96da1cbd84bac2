"""Validation of allocate.devices, containerPath and health.sysfs: every bad
value is reported at its file:line:column with what is wrong, never a traceback."""

from __future__ import annotations

import pytest

from genericdp.config import load_text
from genericdp.config.model import ExtraDevice, GlobMatcher, SysfsProbe, UdevMatcher
from genericdp.errors import ConfigError, ConfigIssue

HEAD = """\
version: v1
resources:
  - name: example.com/gpu
    permissions: rwm
    match:
      - glob: /dev/dri/renderD*
"""


def _issues(extra: str) -> tuple[ConfigIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load_text(HEAD + extra, "c.yaml")
    return caught.value.issues


def test_the_new_fields_reach_the_model() -> None:
    """Entries keep their order; permissions default to the resource's, canonical order."""
    text = """\
        containerPath: "/dev/gpu/{{ device.name }}"
      - udev: {subsystem: tty}
        containerPath: /dev/ttyZIGBEE
    health:
      sysfs: {attribute: ports/*/state, expect: "4: ACTIVE", subsystem: pci}
      timeout: 2s
    allocate:
      devices:
        - {path: /dev/nvidiactl}
        - {path: "/dev/nvidia-uvm*", permissions: wr, containerPath: /dev/uvm, optional: true}
"""
    (definition,) = load_text(HEAD + text).resources
    assert definition.match == (
        GlobMatcher("/dev/dri/renderD*", container_path="/dev/gpu/{{ device.name }}"),
        UdevMatcher(subsystem="tty", container_path="/dev/ttyZIGBEE"),
    )
    assert definition.allocate.devices == (
        ExtraDevice("/dev/nvidiactl", "rwm"),
        ExtraDevice("/dev/nvidia-uvm*", "rw", "/dev/uvm", optional=True),
    )
    assert definition.health is not None
    assert definition.health.exec is None
    assert definition.health.sysfs == SysfsProbe("ports/*/state", "4: ACTIVE", "pci", 2.0)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("dev/nvidiactl", "must be an absolute path under /dev/, e.g. /dev/nvidiactl"),
        ("/etc/shadow", "must be under /dev/: only device nodes are matched"),
        ("/dev/../etc/*", "must not contain '..'"),
        ("/dev/", "names the /dev directory itself"),
    ],
)
def test_device_paths_outside_dev_are_refused(path: str, message: str) -> None:
    """allocate.devices paths follow the glob rules, reported at the value."""
    (issue,) = _issues(f"    allocate:\n      devices:\n        - path: '{path}'\n")
    assert issue.path == "resources[0].allocate.devices[0].path"
    assert (issue.line, issue.column) == (9, 17)
    assert message in issue.message


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ttyZIGBEE", "is not an absolute path"),
        ("/etc/ttyZIGBEE", "is not under /dev/"),
        ("/dev/../ttyZIGBEE", "contains a '..' component"),
        ("/dev//tty", "not a clean path"),
        ("/dev/" + "x" * 300, "component over 255 bytes"),
        ("/dev/a\\tb", "control characters"),
        ("/run/{{ device.name }}", "must be an absolute path under /dev/"),
        ("/dev/{{ device.name }}/../x", "must not contain '..'"),
        ("/dev/{{ device.nmae | nosuchfilter }}", "No filter named 'nosuchfilter'"),
        ("/dev/{{ devices[0].path }}", "unknown name 'devices' (known: device"),
        ("/dev/{{ device.__class__ }}", "private"),
        ("/dev/{% include 'x' %}", "not supported"),
    ],
)
def test_bad_container_paths_are_refused(value: str, message: str) -> None:
    """A containerPath that can never render a clean /dev path, or does not compile."""
    issues = _issues(f'        containerPath: "{value}"\n')
    assert [i.path for i in issues] == ["resources[0].match[0].containerPath"]
    assert issues[0].line == 7
    assert message in issues[0].message


def test_container_path_of_a_device_entry_is_checked_too() -> None:
    """The same rules apply to allocate.devices[].containerPath."""
    text = "    allocate:\n      devices:\n        - {path: /dev/kvm, containerPath: kvm}\n"
    (issue,) = _issues(text)
    assert issue.path == "resources[0].allocate.devices[0].containerPath"
    assert "is not an absolute path" in issue.message


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ("/sys/class/net/eth0/operstate", "must be relative"),
        ("../../../etc/passwd", "must not contain '..'"),
        ("ports//state", "empty components"),
        ("**/state", "must not use '**'"),
    ],
)
def test_hostile_sysfs_attributes_are_refused(attribute: str, message: str) -> None:
    """A sysfs probe's attribute names a file below the device, nothing else."""
    (issue,) = _issues(f"    health:\n      sysfs: {{attribute: '{attribute}', expect: '1'}}\n")
    assert issue.path == "resources[0].health.sysfs.attribute"
    assert message in issue.message


def test_health_needs_exactly_one_probe() -> None:
    """exec and sysfs together, or neither, is an error at health."""
    (both,) = _issues("    health: {exec: [/bin/true], sysfs: {attribute: a, expect: '1'}}\n")
    assert (both.path, both.line, both.column) == ("resources[0].health.sysfs", 7, 33)
    assert "use one probe: exec (a command) or sysfs (an attribute), not both" in both.message
    (neither,) = _issues("    health: {interval: 5s}\n")
    assert neither.path == "resources[0].health"
    assert "needs a probe: exec: [command, args...] or sysfs:" in neither.message


def test_unknown_keys_in_a_device_entry() -> None:
    """Unknown keys are errors, with a suggestion."""
    (issue,) = _issues("    allocate:\n      devices:\n        - {path: /dev/kvm, optinal: true}\n")
    assert "optinal" in issue.message
