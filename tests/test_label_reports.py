"""`validate`, `discover` and `simulate` show the node labels a resource would publish:
validate their keys, discover and simulate their values over the units found in a
fake host's /dev, /sys and udev database, with the dropped ones and why."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakesys import FakeHost
from tests.test_cli import run

CONFIG = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - udev: {subsystem: tty, kernel: "ttyUSB*"}
    labels:
      example.com/serial.count: "{{ units | length }}"
      example.com/serial.model: "{{ units[0].properties.ID_MODEL }}"
      example.com/serial.paths: "{{ devices | map(attribute='path') | join(',') }}"
  - name: example.com/fuse
    match:
      - glob: /dev/fuse
    labels:
      example.com/fuse.present: null
  - name: example.com/kvm
    match:
      - glob: /dev/kvm
  - name: example.com/zigbee
    match:
      - glob: /dev/ttyACM*
    nodeSelector:
      matchLabels: {example.com/zigbee: "true"}
"""
SERIAL_KEYS = "example.com/serial.count, example.com/serial.model, example.com/serial.paths"
SERIAL_LABELS = [
    "    label  example.com/serial.count=2",
    "    label  example.com/serial.model=FT232R_USB_UART",
    "    label  example.com/serial.present=true",
]
PATHS_DROPPED = "    dropped example.com/serial.paths (invalid): '/dev/ttyUSB0,/dev/ttyUSB1': "


def _host(tmp_path: Path) -> tuple[FakeHost, Path]:
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    host.add_usb_serial(port="1-3", serial="BBB222", ttys=("ttyUSB1",))
    host.add_misc("fuse")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    return host, cfg


def test_validate_names_the_label_keys_of_each_resource(tmp_path: Path) -> None:
    """Each resource's keys, the default .present included unless mapped to null."""
    _, cfg = _host(tmp_path)
    result = run("validate", str(cfg))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        f"  example.com/serial  ({cfg}:3)",
        f"    node labels: {SERIAL_KEYS}, example.com/serial.present",
        f"  example.com/fuse  ({cfg}:10)",
        f"  example.com/kvm  ({cfg}:15)",
        "    node labels: example.com/kvm.present",
        f"  example.com/zigbee  ({cfg}:18)",
        "    node labels: example.com/zigbee.present",
    ]


def test_discover_shows_the_labels_over_the_units_found(tmp_path: Path) -> None:
    """Two dongles: count 2, the first one's model, the default; a value that is no label
    value is shown dropped; no units, no labels; a resource not served shows none."""
    host, cfg = _host(tmp_path)
    result = run("discover", str(cfg), *host.root_flags())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("  node labels it would publish:")
    assert lines[at + 1 : at + 4] == SERIAL_LABELS
    assert lines[at + 4].startswith(PATHS_DROPPED), lines[at + 4]
    kvm = lines.index("example.com/kvm  (0 unit(s), capacity 0, groupBy node, count 1)")
    assert lines[kvm + 2] == "  node labels: none (no healthy unit)"
    fuse = lines.index("example.com/fuse  (1 unit(s), capacity 1, groupBy node, count 1)")
    assert not [line for line in lines[fuse:kvm] if "node labels" in line]
    zigbee = lines.index("example.com/zigbee  (0 unit(s), capacity 0, groupBy node, count 1)")
    assert not [line for line in lines[zigbee:] if "node labels" in line]


def test_discover_json_has_the_labels_and_the_dropped(tmp_path: Path) -> None:
    """--json: nodeLabels by key and nodeLabelsDropped with key, reason and detail."""
    host, cfg = _host(tmp_path)
    result = run("discover", str(cfg), "--json", "--node-labels", "zone=a", *host.root_flags())
    assert result.returncode == 0, result.stderr
    serial, fuse, kvm, zigbee = json.loads(result.stdout)["resources"]
    assert serial["nodeLabels"] == {
        "example.com/serial.count": "2",
        "example.com/serial.model": "FT232R_USB_UART",
        "example.com/serial.present": "true",
    }
    (dropped,) = serial["nodeLabelsDropped"]
    assert (dropped["key"], dropped["reason"]) == ("example.com/serial.paths", "invalid")
    assert dropped["detail"].startswith("'/dev/ttyUSB0,/dev/ttyUSB1': ")
    assert (fuse["nodeLabels"], kvm["nodeLabels"], zigbee["nodeLabels"]) == ({}, {}, {})


def test_discover_labels_only_the_units_that_are_not_unhealthy(tmp_path: Path) -> None:
    """A unit whose required node is missing is Unhealthy: it is no label's unit."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/serial\n"
        "    match: [{glob: /dev/ttyUSB*}]\n"
        "    allocate: {devices: [{path: /dev/gdp-missing}]}\n"
    )
    result = run("discover", str(cfg), *host.root_flags())
    assert result.returncode == 0, result.stderr
    assert "  node labels: none (no healthy unit)" in result.stdout.splitlines()


def test_simulate_shows_the_labels_the_daemon_would_publish(tmp_path: Path) -> None:
    """The served resources' labels from the running supervisor's state, as the daemon
    renders them; a resource the node does not serve has none."""
    host, cfg = _host(tmp_path)
    result = run("simulate", str(cfg), "--once", *host.root_flags())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("node labels (published with GENERICDP_NODE_FEATURES):")
    assert lines[at + 1 : at + 5] == ["  example.com/kvm: none (no healthy unit)",
                                      "  example.com/serial:", *SERIAL_LABELS[:2]]  # fmt: skip
    assert lines[at + 5] == SERIAL_LABELS[2]
    assert lines[at + 6].startswith(PATHS_DROPPED), lines[at + 6]
    assert lines[at + 7] == ""
    assert "zigbee" not in "\n".join(lines[at : at + 7])
