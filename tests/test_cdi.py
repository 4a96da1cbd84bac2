"""CDI specs: names, content, versions, atomic files, the publisher, config, Allocate answer."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest

from genericdp.allocation.cdi import (
    SpecPublisher,
    cdi_device_name,
    cdi_kind,
    cdi_spec,
    claim_kind,
    claim_spec_name,
    owner_of,
    qualified_name,
    remove_claim_spec,
    remove_spec,
    remove_stale_claim_specs,
    remove_stale_specs,
    spec_file_name,
    spec_path,
    write_claim_spec,
    write_spec,
)
from genericdp.allocation.plan import plan_allocation
from genericdp.config import load_text
from genericdp.config.model import AllocateSpec, GlobMatcher, ResourceDefinition
from genericdp.config.templates import compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import CdiSpecError, ConfigError
from genericdp.kubelet.devices import replica_ids
from genericdp.kubelet.servicer import allocate_response

# As tags.cncf.io/container-device-interface/pkg/parser checks them.
CDI_VENDOR_OR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
CDI_DEVICE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")

CARD = DeviceNode("/dev/dri/card0", "/dev/dri/card0", 226, 0, "drm")
RENDER = DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128", 226, 128, "drm")
GPU = Unit("pci-0000:03:00.0", (CARD, RENDER))
GPU2 = Unit(
    "pci-0000:04:00.0",
    (
        DeviceNode("/dev/dri/card1", "/dev/dri/card1", 226, 1, "drm"),
        DeviceNode("/dev/dri/renderD129", "/dev/dri/renderD129", 226, 129, "drm"),
    ),
)
BY_ID = Unit(
    "usb-FTDI_A1",
    (DeviceNode("/dev/ttyUSB0", "/dev/serial/by-id/usb-FTDI_A1-if00-port0", 188, 0, "tty"),),
)


def gpu(
    name: str = "example.com/gpu", *, permissions: str = "rw", cdi: bool = True, count: int = 1
) -> ResourceDefinition:
    allocate = AllocateSpec(cdi=cdi)
    return ResourceDefinition(
        name=name,
        match=(GlobMatcher("/dev/dri/*"),),
        permissions=permissions,
        count=count,
        allocate=allocate,
        templates=compile_templates(allocate),
    )


def assert_valid_qualified(name: str) -> None:
    kind, _, device = name.partition("=")
    vendor, _, device_class = kind.partition("/")
    assert CDI_VENDOR_OR_CLASS.fullmatch(vendor), name
    assert CDI_VENDOR_OR_CLASS.fullmatch(device_class), name
    assert CDI_DEVICE.fullmatch(device), name


# -- names -----------------------------------------------------------------------


def test_kind_is_the_resource_name() -> None:
    """A resource name CDI accepts is the kind unchanged (readable in crictl inspect)."""
    assert cdi_kind("example.com/serial") == "example.com/serial"
    assert cdi_kind("acme.io/gpu_v2-x") == "acme.io/gpu_v2-x"


def test_kind_parts_starting_with_a_digit_get_a_letter_first() -> None:
    """Kubernetes allows 3com.example/1wire; CDI wants a letter first in vendor and class."""
    kind = cdi_kind("3com.example/1wire")
    assert kind == "gdp-3com.example/gdp-1wire"
    assert_valid_qualified(f"{kind}=x")


@pytest.mark.parametrize(
    "unit_id",
    ["pci-0000:03:00.0", "usb-FTDI_FT232R_A1-if00", "all", "ttyUSB0", "0", "loop7", "a.b_c:d-e"],
)
def test_valid_unit_ids_are_the_device_names(unit_id: str) -> None:
    """Unit IDs CDI accepts are used as they are: the name tells which unit it is."""
    assert cdi_device_name(unit_id) == unit_id


@pytest.mark.parametrize("unit_id", ["-a", "a-", "_x", "x.", ":", "a::b:", "é", "with space", ""])
def test_invalid_unit_ids_become_valid_stable_names(unit_id: str) -> None:
    """An ID CDI would refuse gets a valid name, the same one every time."""
    name = cdi_device_name(unit_id)
    assert CDI_DEVICE.fullmatch(name), name
    assert cdi_device_name(unit_id) == name


def test_device_names_are_unique_per_unit() -> None:
    """Distinct IDs never share a name, whether they are valid as they are or not."""
    ids = ["a", "-a", "a-", "_a", "a_", ".a", "a.", "x-1", "-x", "x", "x-"]
    names = [cdi_device_name(i) for i in ids]
    assert len(set(names)) == len(ids), names


def test_qualified_names_are_valid() -> None:
    """kind=name, as the runtime resolves it."""
    for resource, unit_id in [("example.com/gpu", "pci-0000:03:00.0"), ("9.io/0", "-x")]:
        assert_valid_qualified(qualified_name(resource, unit_id))
    assert qualified_name("example.com/gpu", "pci-0000:03:00.0") == (
        "example.com/gpu=pci-0000:03:00.0"
    )


def test_spec_file_name_per_kind() -> None:
    """genericdp-<domain>_<name>.json; very long names stay under the file name limit."""
    assert spec_file_name("example.com/serial") == "genericdp-example.com_serial.json"
    long_name = f"{'d' * 60}.{'e' * 60}.{'f' * 60}.example.com/{'n' * 63}"
    name = spec_file_name(long_name)
    assert name.endswith(".json")
    assert len(name) + len(".XXXXXXXX.tmp") + 1 < 255
    assert name != spec_file_name(long_name[:-1] + "m")


# -- content -------------------------------------------------------------------


def test_multi_node_unit_is_one_device_with_every_node() -> None:
    """A GPU (card + render) is one CDI device with both nodes and the resource's permissions."""
    assert cdi_spec(gpu(permissions="rw"), [GPU]) == {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [
            {
                "name": "pci-0000:03:00.0",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/dri/card0",
                            "hostPath": "/dev/dri/card0",
                            "permissions": "rw",
                        },
                        {
                            "path": "/dev/dri/renderD128",
                            "hostPath": "/dev/dri/renderD128",
                            "permissions": "rw",
                        },
                    ]
                },
            }
        ],
    }
    (device,) = cdi_spec(gpu(permissions="r"), [GPU])["devices"]
    assert {n["permissions"] for n in device["containerEdits"]["deviceNodes"]} == {"r"}


def test_link_matches_keep_the_real_node_as_host_path() -> None:
    """A by-id link is the path in the container; hostPath is the node it points to."""
    (device,) = cdi_spec(gpu("example.com/serial"), [BY_ID])["devices"]
    assert device["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/serial/by-id/usb-FTDI_A1-if00-port0",
            "hostPath": "/dev/ttyUSB0",
            "permissions": "rw",
        }
    ]


def test_devices_are_sorted_and_numbers_left_to_the_runtime() -> None:
    """Devices come in name order (same bytes every time); type/major/minor are not guessed."""
    spec = cdi_spec(gpu(), [GPU2, GPU])
    assert [d["name"] for d in spec["devices"]] == ["pci-0000:03:00.0", "pci-0000:04:00.0"]
    for device in spec["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            assert set(node) == {"path", "hostPath", "permissions"}


def test_version_is_the_lowest_the_content_needs() -> None:
    """0.5.0 for hostPath; 0.6.0 once the class holds a dot (older runtimes refuse newer)."""
    assert cdi_spec(gpu("example.com/gpu"), [GPU])["cdiVersion"] == "0.5.0"
    assert cdi_spec(gpu("example.com/gpu.render"), [GPU])["cdiVersion"] == "0.6.0"


# -- files ---------------------------------------------------------------------


def test_write_spec_writes_readable_json_and_no_temporary_file(tmp_path: Path) -> None:
    """The file holds the spec, is world-readable, and nothing else is left in the directory."""
    cdi_dir = tmp_path / "run" / "cdi"  # created on demand
    path = write_spec(cdi_dir, gpu(), [GPU])
    assert path == cdi_dir / "genericdp-example.com_gpu.json"
    assert json.loads(path.read_text()) == cdi_spec(gpu(), [GPU])
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in cdi_dir.iterdir()] == [path.name]


def test_rewrites_replace_the_file_so_readers_never_see_half_a_spec(tmp_path: Path) -> None:
    """A reader polling the file while it is rewritten always parses a whole spec."""
    many = [
        Unit(f"unit{i}", (DeviceNode(f"/dev/n{i}", f"/dev/n{i}"),)) for i in range(300)
    ]  # about 30 KB: an in-place write would be seen half done
    path = write_spec(tmp_path, gpu(), many[:1])
    bad: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                json.loads(path.read_bytes())
            except ValueError as exc:
                bad.append(str(exc))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for round_ in range(100):
            write_spec(tmp_path, gpu(), many[: 1 + (round_ % 2) * 299])
    finally:
        done.set()
        reader.join()
    assert bad == []
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_write_into_an_unusable_directory_says_where_and_why(tmp_path: Path) -> None:
    """A CDI directory under a regular file: CdiSpecError naming the spec path, not a traceback."""
    (tmp_path / "blocker").write_text("")
    with pytest.raises(CdiSpecError, match=r"cannot write CDI spec .*blocker/cdi/genericdp-"):
        write_spec(tmp_path / "blocker" / "cdi", gpu(), [GPU])


def test_remove_spec(tmp_path: Path) -> None:
    """Removing returns the path once, then None."""
    path = write_spec(tmp_path, gpu(), [GPU])
    assert remove_spec(tmp_path, "example.com/gpu") == path
    assert not path.exists()
    assert remove_spec(tmp_path, "example.com/gpu") is None


# -- the publisher ---------------------------------------------------------------


def test_publisher_writes_only_changes(tmp_path: Path) -> None:
    """Same units: no write; changed units: a new file; no units: no file (it would be invalid)."""
    publisher = SpecPublisher(tmp_path)
    path = spec_path(tmp_path, "example.com/gpu")
    assert publisher.publish(gpu(), [GPU])
    inode = path.stat().st_ino
    assert not publisher.publish(gpu(), [GPU])
    assert path.stat().st_ino == inode
    assert publisher.publish(gpu(), [GPU, GPU2])
    assert len(json.loads(path.read_text())["devices"]) == 2
    assert publisher.publish(gpu(), [])
    assert not path.exists()


def test_publisher_knows_which_units_the_file_lacks(tmp_path: Path) -> None:
    """Units not written, or written with other nodes or permissions, are unpublished."""
    publisher = SpecPublisher(tmp_path)
    publisher.publish(gpu(), [GPU])
    assert publisher.unpublished(gpu(), [GPU]) == ()
    assert publisher.unpublished(gpu(), [GPU, GPU2]) == (GPU2.id,)
    moved = Unit(GPU.id, (CARD,))
    assert publisher.unpublished(gpu(), [moved]) == (GPU.id,)
    assert publisher.unpublished(gpu(permissions="r"), [GPU]) == (GPU.id,)


def test_publisher_after_a_failed_write_writes_again(tmp_path: Path) -> None:
    """A failed write leaves nothing counted as published; the next call writes."""
    blocker = tmp_path / "cdi"
    blocker.write_text("")
    publisher = SpecPublisher(blocker)
    with pytest.raises(CdiSpecError):
        publisher.publish(gpu(), [GPU])
    assert publisher.unpublished(gpu(), [GPU]) == (GPU.id,)
    blocker.unlink()
    assert publisher.publish(gpu(), [GPU])
    assert publisher.unpublished(gpu(), [GPU]) == ()


def test_retract_removes_only_what_we_may_have_written(tmp_path: Path) -> None:
    """A publisher that never wrote leaves the directory alone; one that did removes its file."""
    other = write_spec(tmp_path, gpu(), [GPU])  # say, left by someone else
    assert SpecPublisher(tmp_path).retract("example.com/gpu") is None
    assert other.exists()
    publisher = SpecPublisher(tmp_path)
    publisher.publish(gpu(), [GPU2])
    assert publisher.retract("example.com/gpu") == other
    assert os.listdir(tmp_path) == []


# -- config and the Allocate answer -------------------------------------------------


def _config(cdi: str) -> str:
    return (
        "version: v1\nresources:\n- name: example.com/gpu\n  match: [glob: /dev/dri/*]\n"
        f"  allocate:\n    cdi: {cdi}\n"
    )


def test_schema_accepts_a_boolean_cdi() -> None:
    """cdi: true reaches the model; absent means false."""
    assert load_text(_config("true")).resources[0].allocate.cdi is True
    absent = "version: v1\nresources:\n- name: example.com/gpu\n  match: [glob: /dev/dri/*]\n"
    assert load_text(absent).resources[0].allocate.cdi is False


def test_schema_rejects_cdi_yes_at_its_key() -> None:
    """cdi: "yes" (a string in YAML 1.2) is refused, located at allocate.cdi."""
    with pytest.raises(ConfigError) as caught:
        load_text(_config('"yes"'), "gpu.yaml")
    (issue,) = caught.value.issues
    assert issue.path == "resources[0].allocate.cdi"
    assert (issue.file, issue.line) == ("gpu.yaml", 6)


def test_allocation_carries_one_cdi_name_per_unit_and_still_the_device_specs() -> None:
    """cdi: true adds kind=name per unit (replicas of one unit once) next to every device node."""
    definition = gpu(count=2)
    ids = [*replica_ids(GPU.id, 2), replica_ids(GPU2.id, 2)[1]]
    allocation = plan_allocation(definition, [GPU, GPU2], device_ids=ids).receives
    assert allocation.cdi_devices == (
        "example.com/gpu=pci-0000:03:00.0",
        "example.com/gpu=pci-0000:04:00.0",
    )
    assert len(allocation.devices) == 4
    (response,) = allocate_response([allocation]).container_responses
    assert [c.name for c in response.cdi_devices] == list(allocation.cdi_devices)
    assert plan_allocation(gpu(cdi=False), [GPU]).receives.cdi_devices == ()


def test_stale_specs_of_either_backend_are_ours_alone(tmp_path: Path) -> None:
    """At start each backend removes its own stale specs and nothing else: not the
    other backend's, not a foreign or linked file, not a file nested too deep to read."""
    gpu_spec = write_spec(tmp_path, gpu(), [GPU])
    gone_spec = write_spec(tmp_path, gpu("example.com/gone"), [GPU])
    ours = {"kind": claim_kind("genericdp.io")}
    kept_claim = write_claim_spec(tmp_path, "genericdp.io", "uid-1", ours)
    stale_claim = write_claim_spec(tmp_path, "genericdp.io", "uid-2", ours)
    other_driver = write_claim_spec(tmp_path, "other.io", "uid-3", {"kind": claim_kind("other.io")})
    foreign = tmp_path / spec_file_name("example.com/foreign")
    foreign.write_text(json.dumps({"kind": "vendor.com/other"}))
    deep = tmp_path / spec_file_name("example.com/deep")
    deep.write_text("[" * 100_000)
    deep_claim = tmp_path / claim_spec_name("genericdp.io", "uid-4")
    deep_claim.write_text("[" * 100_000)
    linked = tmp_path / spec_file_name("example.com/linked")
    linked.symlink_to(gone_spec)
    assert owner_of(deep) is None
    assert remove_stale_specs(tmp_path, [gpu().name]) == [gone_spec]
    assert remove_stale_claim_specs(tmp_path, "genericdp.io", ["uid-1"]) == [stale_claim]
    left = {gpu_spec, kept_claim, other_driver, foreign, deep, deep_claim, linked}
    assert set(tmp_path.iterdir()) == left


def test_two_drivers_specs_of_one_claim_are_two_files_each_its_own(tmp_path: Path) -> None:
    """A claim with devices of two genericdp drivers has one spec per driver: neither
    write overwrites the other's, and one driver's removal and stale cleanup (even of a
    spec that claims its kind) leave the other's file in place."""
    mine = write_claim_spec(tmp_path, "genericdp.io", "uid-1", {"kind": claim_kind("genericdp.io")})
    theirs = write_claim_spec(tmp_path, "other.io", "uid-1", {"kind": claim_kind("other.io")})
    posing = write_claim_spec(tmp_path, "other.io", "uid-2", {"kind": claim_kind("genericdp.io")})
    assert mine != theirs
    assert remove_stale_claim_specs(tmp_path, "genericdp.io", []) == [mine]
    assert set(tmp_path.iterdir()) == {theirs, posing}
    write_claim_spec(tmp_path, "genericdp.io", "uid-1", {"kind": claim_kind("genericdp.io")})
    assert remove_claim_spec(tmp_path, "genericdp.io", "uid-1")
    assert set(tmp_path.iterdir()) == {theirs, posing}


def test_the_temporary_of_a_claim_spec_write_cut_short_is_removed_at_start(
    tmp_path: Path,
) -> None:
    """A write the daemon was killed in (``write_atomically``'s dot-file) goes with the
    stale claim specs; another driver's stays."""
    ours = tmp_path / f".{claim_spec_name('genericdp.io', 'uid-1')}.abc123.tmp"
    other = tmp_path / f".{claim_spec_name('other.io', 'uid-2')}.def456.tmp"
    for path in (ours, other):
        path.write_text("{")
    assert remove_stale_claim_specs(tmp_path, "genericdp.io", ["uid-1"]) == [ours]
    assert set(tmp_path.iterdir()) == {other}
