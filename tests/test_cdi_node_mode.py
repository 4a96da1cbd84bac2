"""Device nodes keep the host node's mode and owner in the container, or get the
ones ``allocate.deviceNodes`` gives: recorded by discovery, written in both
backends' CDI specs, applied as a CDI runtime does, and refused when malformed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from genericdp.allocation.cdi import SpecPublisher, cdi_spec, spec_path
from genericdp.allocation.plan import plan_allocation
from genericdp.config import load_text
from genericdp.config.model import NodeOwnership
from genericdp.discovery import discover
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra.cdispec import claim_spec
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.dra.embedded import resolve_cdi
from genericdp.errors import ConfigError, ConfigIssue
from tests.dra_fakes import DRIVER, NODE, MemoryClaims, RecordedHooks, allocated, claim
from tests.dra_fakes import SERIAL as DRA_SERIAL
from tests.dra_fakes import definition as dra_definition
from tests.dra_fakes import unit as dra_unit
from tests.dra_kubelet import DraEventKind, EmbeddedDraKubelet
from tests.fakesys import FakeHost, can_mknod
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import config, running

RUNC_DEFAULT_MODE = 0o666  # runc's mode for a device without fileMode


@dataclass(frozen=True)
class CreatedNode:
    """A device node as the runtime creates it in the container."""

    path: str
    host_path: str
    mode: int
    uid: int
    gid: int


def created_nodes(
    device_nodes: Iterable[Mapping[str, Any]], *, uid: int = 0, gid: int = 0
) -> tuple[CreatedNode, ...]:
    """The nodes ``deviceNodes`` entries become in a container whose process runs as
    ``uid``:``gid``: the CDI library (containerd, CRI-O) gives a node without ``uid``
    or ``gid`` to the process's user or group when that is not root, and runc makes
    a node without ``fileMode`` with mode 0666."""
    return tuple(
        CreatedNode(
            path=entry["path"],
            host_path=entry.get("hostPath", entry["path"]),
            mode=int(entry.get("fileMode", RUNC_DEFAULT_MODE)) & 0o777,
            uid=int(entry["uid"]) if "uid" in entry else uid,
            gid=int(entry["gid"]) if "gid" in entry else gid,
        )
        for entry in device_nodes
    )


SERIAL = "resources:\n- name: example.com/serial\n  match:\n    - glob: /dev/ttyUSB*\n"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners and users needs root")


def _host(base: Path, mode: int = 0o600) -> FakeHost:
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    host.node("/dev/ttyUSB0").chmod(mode)
    return host


def _nodes(spec: dict[str, object]) -> list[dict[str, object]]:
    devices = spec["devices"]
    assert isinstance(devices, list)
    return [n for d in devices for n in d["containerEdits"]["deviceNodes"]]


def test_discovery_records_mode_and_owner(tmp_path: Path) -> None:
    """Each node carries its host permission bits, uid and gid, as lstat gives them."""
    host = _host(tmp_path, 0o640)
    (definition,) = config(SERIAL).resources
    (unit,) = discover(definition, host.roots)
    (node,) = unit.nodes
    info = os.lstat(host.node("/dev/ttyUSB0"))
    assert (node.mode, node.uid, node.gid) == (0o640, info.st_uid, info.st_gid)


def test_a_real_character_device_keeps_its_mode(tmp_path: Path) -> None:
    """A node made with mknod (as a real /dev has) is described with its own mode."""
    if not can_mknod(tmp_path):
        pytest.skip("needs CAP_MKNOD")
    host = FakeHost(tmp_path / "host", device_nodes=True)
    host.add_usb_serial("1-2", serial="A1", ttys=("ttyUSB0",))
    real = host.node("/dev/ttyUSB0")
    assert stat.S_ISCHR(os.lstat(real).st_mode)
    real.chmod(0o620)
    (definition,) = config(SERIAL).resources
    (unit,) = discover(definition, host.roots)
    assert unit.nodes[0].mode == 0o620
    assert _nodes(cdi_spec(definition, [unit]))[0]["fileMode"] == 0o620


def test_units_are_equal_across_rescans_until_a_chmod(tmp_path: Path) -> None:
    """Rescans give equal units; a chmod or chown on the host changes the unit,
    and the published CDI spec follows it."""
    host = _host(tmp_path)
    (definition,) = config(SERIAL + "  allocate: {cdi: true}\n").resources
    first = discover(definition, host.roots)
    assert discover(definition, host.roots) == first
    publisher = SpecPublisher(tmp_path / "cdi")
    assert publisher.publish(definition, first)
    assert not publisher.publish(definition, discover(definition, host.roots))

    host.node("/dev/ttyUSB0").chmod(0o660)
    changed = discover(definition, host.roots)
    assert changed != first
    assert publisher.unpublished(definition, changed) == (changed[0].id,)
    assert publisher.publish(definition, changed)
    written = json.loads(spec_path(tmp_path / "cdi", definition.name).read_text())
    assert _nodes(written)[0]["fileMode"] == 0o660
    if os.geteuid() == 0:
        os.chown(host.node("/dev/ttyUSB0"), 0, 44)
        owned = discover(definition, host.roots)
        assert owned != changed
        assert publisher.publish(definition, owned)
        written = json.loads(spec_path(tmp_path / "cdi", definition.name).read_text())
        assert (_nodes(written)[0]["uid"], _nodes(written)[0]["gid"]) == (0, 44)


def test_device_plugin_cdi_spec_carries_the_host_mode(tmp_path: Path) -> None:
    """Without allocate.deviceNodes, the spec's node is the host's: a crw------- node
    stays 0600 and its owner's, within the cdiVersion used without these fields."""
    host = _host(tmp_path)
    (definition,) = config(SERIAL + "  allocate: {cdi: true}\n").resources
    spec = cdi_spec(definition, discover(definition, host.roots))
    info = os.lstat(host.node("/dev/ttyUSB0"))
    assert _nodes(spec) == [
        {
            "path": "/dev/ttyUSB0",
            "hostPath": "/dev/ttyUSB0",
            "permissions": "rw",
            "fileMode": 0o600,
            "uid": info.st_uid,
            "gid": info.st_gid,
        }
    ]
    assert spec["cdiVersion"] == "0.5.0"


def test_device_nodes_setting_overrides_what_it_names(tmp_path: Path) -> None:
    """allocate.deviceNodes gives the group and mode; the uid it leaves stays the host's,
    for the unit's nodes and the allocate.devices ones alike."""
    host = _host(tmp_path)
    host.add_misc("kvm", minor=232)
    text = SERIAL + (
        '  allocate:\n    cdi: true\n    deviceNodes: {gid: 44, mode: "0660"}\n'
        "    devices: [{path: /dev/kvm}]\n"
    )
    (definition,) = config(text).resources
    assert definition.allocate.device_nodes == NodeOwnership(mode=0o660, gid=44)
    spec = cdi_spec(definition, discover(definition, host.roots))
    host_uid = os.lstat(host.node("/dev/ttyUSB0")).st_uid
    assert [(n["path"], n["fileMode"], n["uid"], n["gid"]) for n in _nodes(spec)] == [
        ("/dev/ttyUSB0", 0o660, host_uid, 44),
        ("/dev/kvm", 0o660, os.lstat(host.node("/dev/kvm")).st_uid, 44),
    ]


def test_dra_claim_spec_carries_mode_and_owner(tmp_path: Path) -> None:
    """Under DRA the claim's CDI devices carry the same fileMode, uid and gid."""
    host = _host(tmp_path)
    text = SERIAL + '  allocate:\n    deviceNodes: {uid: 1000, gid: 44, mode: "640"}\n'
    (definition,) = config(text).resources
    units = discover(definition, host.roots)
    plan = plan_allocation(definition, units, ("serial-0",))
    spec = claim_spec("genericdp.io", "uid-1", [plan])
    assert [(n["fileMode"], n["uid"], n["gid"]) for n in _nodes(spec)] == [(0o640, 1000, 44)]


def test_runtime_model_applies_mode_and_owner() -> None:
    """Given fileMode/uid/gid the runtime uses them; without, runc's 0666 and the
    process's user and group (what containers got before these fields)."""
    given = {"path": "/dev/a", "hostPath": "/dev/b", "fileMode": 0o660, "uid": 0, "gid": 44}
    bare = {"path": "/dev/c"}
    assert created_nodes([given, bare], uid=1000, gid=1000) == (
        CreatedNode("/dev/a", "/dev/b", 0o660, 0, 44),
        CreatedNode("/dev/c", "/dev/c", 0o666, 1000, 1000),
    )


def _opens(path: Path, *, uid: int, gid: int, groups: list[int]) -> bool:
    """Whether a process running as uid:gid with ``groups`` may open ``path`` read-write
    (the kernel decides: a shell of that user opens it)."""
    done = subprocess.run(
        ["/bin/sh", "-c", ': <>"$1"', "sh", str(path)],
        user=uid,
        group=gid,
        extra_groups=groups,
        cwd="/",
        check=False,
        capture_output=True,
        timeout=30,
    )
    return done.returncode == 0


@AS_ROOT
def test_a_non_root_consumer_opens_its_node_with_the_configured_group(tmp_path: Path) -> None:
    """A node made as the runtime would from our spec: with the host's 0600 root node a
    user 1000 cannot open it; with deviceNodes {gid: 44, mode: "0660"} and group 44
    (supplementalGroups) it can, and without the group it still cannot."""
    host = _host(tmp_path)
    os.chown(host.node("/dev/ttyUSB0"), 0, 0)
    (plain,) = config(SERIAL).resources
    text = SERIAL + '  allocate:\n    deviceNodes: {gid: 44, mode: "0660"}\n'
    (granted,) = config(text).resources
    units = discover(plain, host.roots)
    # Where user 1000 can reach: pytest's own temporary tree is root's alone.
    with tempfile.TemporaryDirectory(dir="/tmp") as where:
        container = Path(where)
        container.chmod(0o755)
        kept = _made(container / "kept", _nodes(cdi_spec(plain, units)))
        assert not _opens(kept, uid=1000, gid=1000, groups=[44])
        shared = _made(container / "shared", _nodes(cdi_spec(granted, units)))
        assert _opens(shared, uid=1000, gid=1000, groups=[44])
        assert not _opens(shared, uid=1000, gid=1000, groups=[])


def _made(path: Path, entries: list[dict[str, object]]) -> Path:
    """A file standing for the node the runtime makes from ``entries`` for user 1000."""
    (node,) = created_nodes(entries, uid=1000, gid=1000)
    path.write_text("")
    os.chown(path, node.uid, node.gid)
    path.chmod(node.mode)
    return path


HEAD = "version: v1\nresources:\n  - name: example.com/serial\n    match: [{glob: /dev/ttyUSB*}]\n"


def _issues(extra: str) -> tuple[ConfigIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load_text(HEAD + "    allocate:\n      deviceNodes:\n" + extra, "c.yaml")
    return caught.value.issues


@pytest.mark.parametrize(
    ("line", "key", "message"),
    [
        ('        mode: "4755"\n', "mode", "is not a file mode"),
        ('        mode: "0668"\n', "mode", "is not a file mode"),
        ('        mode: "rw"\n', "mode", "three octal digits"),
        ("        mode: 0660\n", "mode", 'must be a string: quote it, e.g. "0660"'),
        ("        gid: -1\n", "gid", "must be between 0 and 4294967294"),
        ("        uid: 4294967295\n", "uid", "must be between 0 and 4294967294"),
        ('        gid: "44"\n', "gid", "must be"),
    ],
)
def test_bad_device_node_settings_are_refused_at_their_value(
    line: str, key: str, message: str
) -> None:
    """Each bad mode, uid or gid is reported at its line and column with what is wrong."""
    (issue,) = _issues(line)
    assert issue.path == f"resources[0].allocate.deviceNodes.{key}"
    assert (issue.file, issue.line, issue.column) == ("c.yaml", 7, 9 + len(key) + 2)
    assert message in issue.message


def test_unknown_and_empty_device_node_settings_are_refused() -> None:
    """A key the section does not know, or an empty section, is an error."""
    (unknown,) = _issues("        group: 44\n")
    assert "group" in unknown.message
    assert unknown.line == 7
    with pytest.raises(ConfigError) as caught:
        load_text(HEAD + "    allocate:\n      deviceNodes: {}\n", "c.yaml")
    (empty,) = caught.value.issues
    assert "mode, uid, gid" in empty.message
    assert (empty.line, empty.path) == (6, "resources[0].allocate.deviceNodes")


def _one_serial(kubelet: EmbeddedKubelet) -> bool:
    known = kubelet.resources.get("example.com/serial")
    return known is not None and known.capacity == 1


async def test_device_plugin_cdi_mode_serves_the_configured_group(tmp_path: Path) -> None:
    """Through the supervisor and the embedded kubelet: the names in the Allocate
    answer resolve to nodes the runtime creates 0660 in group 44, owned as on the host."""
    host = _host(tmp_path)
    text = SERIAL + '  allocate:\n    cdi: true\n    deviceNodes: {gid: 44, mode: "0660"}\n'
    cdi_dir = tmp_path / "cdi"
    async with running(tmp_path, config(text), discover=discover, cdi_dir=cdi_dir) as rt:
        await rt.until(_one_serial)
        response = await rt.kubelet.allocate("example.com/serial", 1, pod="p1")
        (container,) = response.container_responses
        ids = [c.name for c in container.cdi_devices]
        edits = resolve_cdi(cdi_dir, ids)
    host_uid = os.lstat(host.node("/dev/ttyUSB0")).st_uid
    assert created_nodes(edits["deviceNodes"], uid=1000, gid=1000) == (
        CreatedNode("/dev/ttyUSB0", "/dev/ttyUSB0", 0o660, host_uid, 44),
    )


async def test_dra_prepare_serves_the_host_mode_and_owner(tmp_path: Path) -> None:
    """Through the DRA driver and the embedded DRA kubelet: the prepared claim's node
    is created with the host node's mode and owner, not 0666 for the container's user."""
    node = DeviceNode("/dev/ttyUSB1", "/dev/ttyUSB1", mode=0o600, uid=0, gid=5)
    claims = MemoryClaims()
    claims.allocate(claim(), allocated(DRA_SERIAL, dra_unit(1)))
    d = DraDriver(
        driver=DRIVER,
        node_name=NODE,
        paths=DriverPaths(tmp_path / "registry", tmp_path / "plugins", tmp_path / "cdi"),
        claims=claims,
        run_hook=RecordedHooks(),
    )
    d.inventory.set_resource(dra_definition(), [Unit("A1", (node,))])
    async with EmbeddedDraKubelet(tmp_path / "registry") as kubelet:
        await d.start()
        try:
            await kubelet.wait_until(lambda k: k.count(DraEventKind.REGISTERED, DRIVER) == 1)
            ids = await kubelet.prepare_pod(DRIVER, [claim()])
            edits = resolve_cdi(tmp_path / "cdi", ids)
        finally:
            await d.close()
    assert created_nodes(edits["deviceNodes"], uid=1000, gid=1000) == (
        CreatedNode("/dev/ttyUSB1", "/dev/ttyUSB1", 0o600, 0, 5),
    )
