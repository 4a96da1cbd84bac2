"""`validate`, `discover` and `simulate` with `--node-labels`: which resources a node
with those labels serves, and for the others the requirement that fails."""

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
      - glob: /dev/ttyUSB*
    nodeSelector:
      matchLabels: {example.com/serial: present}
      matchExpressions: [{key: zone, operator: NotIn, values: [b]}]
  - name: example.com/fuse
    match:
      - glob: /dev/fuse
"""
NEEDS_ZONE = "nodeSelector needs zone notin (b)"


def _host(tmp_path: Path) -> tuple[FakeHost, Path]:
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    host.add_misc("fuse")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    return host, cfg


def test_validate_says_which_resources_the_labels_select(tmp_path: Path) -> None:
    """Each resource is served or not, with the first requirement the labels fail."""
    _, cfg = _host(tmp_path)
    result = run("validate", str(cfg), "--node-labels", "example.com/serial=present,zone=b")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        f"  example.com/serial  ({cfg}:3)  not served: {NEEDS_ZONE}",
        "    node labels: example.com/serial.present",
        f"  example.com/fuse  ({cfg}:9)  served",
        "    node labels: example.com/fuse.present",
    ]
    result = run("validate", str(cfg), "--node-labels", "example.com/serial=present")
    assert f"  example.com/serial  ({cfg}:3)  served" in result.stdout.splitlines()


def test_validate_refuses_bad_labels_as_a_usage_error(tmp_path: Path) -> None:
    """A key Kubernetes would refuse is a usage error (exit 2) naming it."""
    _, cfg = _host(tmp_path)
    result = run("validate", str(cfg), "--node-labels", "Zone/x=1")
    assert result.returncode == 2
    assert "--node-labels: key 'Zone/x': the prefix 'Zone' is not a DNS subdomain" in result.stderr


def test_discover_marks_resources_a_node_would_not_serve(tmp_path: Path) -> None:
    """discover shows every resource's units, and why one is not served with these labels
    (or that the labels are unknown without --node-labels)."""
    host, cfg = _host(tmp_path)
    result = run("discover", str(cfg), "--json", "--node-labels", "zone=b", *host.root_flags())
    assert result.returncode == 0, result.stderr
    serial, fuse = json.loads(result.stdout)["resources"]
    assert (serial["served"], serial["notServed"]) == (
        False,
        "nodeSelector needs example.com/serial=present",
    )
    assert serial["capacity"] == 1
    assert (fuse["served"], fuse["notServed"]) == (True, None)
    result = run("discover", str(cfg), *host.root_flags())
    assert (
        "  not served on this node: this node's labels are unknown (give them with --node-labels)"
        in result.stdout.splitlines()
    )


def test_simulate_serves_only_what_the_labels_select(tmp_path: Path) -> None:
    """The embedded kubelet registers the selected resources only; the others say why."""
    host, cfg = _host(tmp_path)

    def simulate(labels: str) -> str:
        done = run("simulate", str(cfg), "--once", "--node-labels", labels, *host.root_flags())
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = simulate("example.com/serial=present,zone=b")
    assert f"  example.com/serial: not served on this node: {NEEDS_ZONE}" in out.splitlines()
    assert "example.com/fuse: registered" in out
    assert "allocate example.com/serial" not in out
    out = simulate("example.com/serial=present,zone=a")
    assert "example.com/serial: registered" in out
    assert "allocate example.com/serial=1" in out
