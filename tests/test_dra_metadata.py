"""Device metadata (KEP-5304) of prepared claims: the files, their CDI mounts through
the embedded DRA kubelet, removal at unprepare, rebuilding after a restart, hostile
values and names."""

from __future__ import annotations

import json
import os
import stat
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from genericdp.discovery.model import Unit
from genericdp.dra.checkpoint import Checkpoint
from genericdp.dra.driver import DraDriver
from genericdp.dra.embedded import resolve_cdi
from genericdp.dra.metadata import API_VERSIONS
from genericdp.kubeletplugin.claims import AllocatedDevice, ClaimRef
from genericdp.kubeletplugin.naming import device_name
from tests.dra_drivers import new_driver, started
from tests.dra_fakes import (
    DRIVER,
    NODE,
    SERIAL,
    MemoryClaims,
    allocated,
    claim,
    definition,
    setup,
    unit,
)
from tests.dra_kubelet import EmbeddedDraKubelet

CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"


def host_file(base: Path, ref: ClaimRef, request: str = "req") -> Path:
    """Where the kubelet plugin helper puts a request's file: under the plugin dir."""
    top = base / "plugins" / DRIVER / "dra-device-metadata"
    return top / f"{ref.namespace}_{ref.name}" / request / "metadata.json"


def objects(path: Path) -> list[dict[str, Any]]:
    """The JSON stream: one object after another, as a Go json.Decoder reads it."""
    text, found, at = path.read_text(), [], 0
    decoder = json.JSONDecoder()
    while at < len(text):
        obj, at = decoder.raw_decode(text, at)
        found.append(obj)
        while at < len(text) and text[at].isspace():
            at += 1
    return found


def driver(
    base: Path, claims: MemoryClaims, *units: Unit
) -> AbstractAsyncContextManager[DraDriver]:
    """The driver of ``units`` (A0 and A1), started; closed after."""
    return started(new_driver(base, claims, units=units))


async def test_a_prepared_claim_has_its_metadata_mounted_and_unprepare_removes_it(
    base: Path,
) -> None:
    """The kubelet hands the container the metadata mount with the devices; the file is
    the stream of both versions, newest first, with the slice's attributes and the
    device nodes; 0644 in directories nobody else may write; gone after unprepare."""
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(1))})
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        ids = await kubelet.prepare_pod(DRIVER, [claim()])
        mounts = resolve_cdi(base / "cdi", ids)["mounts"]
        path = host_file(base, claim())
        assert mounts == [
            {
                "hostPath": str(path),
                "containerPath": f"{CONTAINER_DIR}/resourceclaims/claim-1/req/"
                f"{DRIVER}-metadata.json",
                "type": "bind",
                "options": ["ro", "bind"],
            }
        ]
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        for directory in (path.parent, path.parent.parent, path.parent.parent.parent):
            assert stat.S_IMODE(directory.stat().st_mode) == 0o755
        first, second = objects(path)
        assert [first["apiVersion"], second["apiVersion"]] == list(API_VERSIONS)
        assert API_VERSIONS[0] == "metadata.resource.k8s.io/v1beta1"
        assert {k: v for k, v in first.items() if k != "apiVersion"} == {
            k: v for k, v in second.items() if k != "apiVersion"
        }
        assert first["kind"] == "DeviceMetadata"
        assert first["metadata"] == {
            "name": "claim-1",
            "namespace": "default",
            "uid": claim().uid,
            "generation": 1,
        }
        assert "podClaimName" not in first
        (request,) = first["requests"]
        assert request["name"] == "req"
        (dev,) = request["devices"]
        assert (dev["driver"], dev["pool"], dev["name"]) == (
            DRIVER,
            NODE,
            device_name(SERIAL, "A1"),
        )
        assert dev["attributes"] == {
            "resource": {"string": SERIAL},
            "unitID": {"string": "A1"},
            "nodes": {"int": 1},
            "deviceNode0": {"string": "/dev/serial/by-id/usb-A1"},
        }
        await kubelet.unprepare(DRIVER, [claim()])
        assert not path.parent.parent.exists()
        assert not list((base / "cdi").glob("*.json"))


async def test_metadata_is_written_again_from_the_checkpoint_at_start(base: Path) -> None:
    """A restarted daemon writes the files of every prepared claim again (the unit is
    gone from its inventory meanwhile) and removes those of claims not prepared."""
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(1))})
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        await kubelet.prepare_pod(DRIVER, [claim()])
    path = host_file(base, claim())
    written = path.read_bytes()
    path.unlink()
    stale = host_file(base, claim(7))
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    async with driver(base, MemoryClaims(), unit(0)):
        assert path.read_bytes() == written
        assert not stale.parent.parent.exists()


async def test_a_claim_made_from_a_template_is_under_the_pods_claim_name(base: Path) -> None:
    """With resource.kubernetes.io/pod-claim-name, the container path is under
    resourceclaimtemplates/<pod's name> and the file says podClaimName; two requests
    have a file and a mount each, each with its first device."""
    s = setup(base, [(definition(), [unit(0), unit(1)])])
    a0, a1 = device_name(SERIAL, "A0"), device_name(SERIAL, "A1")
    s.claims.allocate(
        claim(),
        [AllocatedDevice("ports", NODE, a0), AllocatedDevice("spare", NODE, a1)],
        pod_claim="serial",
    )
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert result.error == ""
    assert [d.cdi_ids[1:] for d in result.devices] == [
        (f"{DRIVER}/claim={claim().uid}_ports",),
        (f"{DRIVER}/claim={claim().uid}_spare",),
    ]
    mounts = resolve_cdi(s.cdi_dir, [i for d in result.devices for i in d.cdi_ids])["mounts"]
    assert [m["containerPath"] for m in mounts] == [
        f"{CONTAINER_DIR}/resourceclaimtemplates/serial/{r}/{DRIVER}-metadata.json"
        for r in ("ports", "spare")
    ]
    for mount, name in zip(mounts, (a0, a1), strict=True):
        (first, _) = objects(Path(mount["hostPath"]))
        assert first["podClaimName"] == "serial"
        assert [d["name"] for d in first["requests"][0]["devices"]] == [name]
    again = await s.preparer.prepare([claim()])  # from the checkpoint: the same answer
    assert again[claim().uid] == result


async def test_hostile_discovered_values_stay_inside_json(base: Path) -> None:
    """A USB serial string with quotes, braces, slashes, control characters and
    non-ASCII is one JSON string value; it never shapes a path."""
    hostile = '"},{"x":"../../../etc/passwd\n\x00\u202e'
    odd = replace(unit(0), properties={"ID_SERIAL_SHORT": hostile})
    s = setup(base, [(definition(), [odd])])
    s.claims.allocate(claim(), allocated(SERIAL, odd))
    assert (await s.preparer.prepare([claim()]))[claim().uid].error == ""
    top = base / "plugin" / "dra-device-metadata"
    files = sorted(p.relative_to(top) for p in top.rglob("*") if p.is_file())
    assert files == [Path("default_claim-1/req/metadata.json")]
    first, second = objects(top / files[0])
    assert first["requests"][0]["devices"][0]["attributes"]["serial"] == {"string": hostile}
    assert second["requests"][0]["devices"][0]["attributes"]["serial"] == {"string": hostile}


async def test_names_that_would_leave_the_metadata_directory_fail_the_claim(base: Path) -> None:
    """A request, or a pod claim annotation, that is no DNS label fails its claim saying
    so, before any hook or file; claims with good names are prepared."""
    s = setup(base, [(definition(), [unit(0), unit(1), unit(2)])])
    s.claims.allocate(claim(1), [AllocatedDevice("../../x", NODE, device_name(SERIAL, "A0"))])
    s.claims.allocate(claim(2), allocated(SERIAL, unit(1)), pod_claim="../../../etc")
    s.claims.allocate(claim(3), allocated(SERIAL, unit(2)))
    answer = await s.preparer.prepare([claim(1), claim(2), claim(3)])
    assert "request '../../x' is not a DNS label" in answer[claim(1).uid].error
    assert "pod-claim-name '../../../etc' is not a DNS label" in answer[claim(2).uid].error
    assert answer[claim(3).uid].error == ""
    top = base / "plugin" / "dra-device-metadata"
    assert [p.name for p in top.iterdir()] == ["default_claim-3"]
    assert s.checkpoint.get(claim(1).uid) is None
    assert s.hooks.runs == []


async def test_a_link_in_the_metadata_directory_is_never_followed(base: Path) -> None:
    """A link where a claim's directory goes fails the claim (its file is not written
    through it), and unprepare removes the link, not what it points to."""
    s = setup(base, [(definition(), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    elsewhere = base / "elsewhere"
    (elsewhere / "req").mkdir(parents=True)
    top = base / "plugin" / "dra-device-metadata"
    top.mkdir(parents=True)
    os.symlink(elsewhere, top / "default_claim-1")
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert "cannot write device metadata" in result.error
    assert list(elsewhere.rglob("*.json")) == []
    assert await s.preparer.unprepare([claim()]) == {claim().uid: ""}
    assert not (top / "default_claim-1").exists()
    assert (elsewhere / "req").is_dir()


async def test_checkpoint_attributes_of_the_wrong_shape_drop_their_entry(base: Path) -> None:
    """The checkpoint keeps each device's attributes for the rebuild; an entry whose
    attributes are not [name, type, value] of a known type is dropped, others kept."""
    s = setup(base, [(definition(), [unit(0), unit(1)])])
    s.claims.allocate(claim(1), allocated(SERIAL, unit(0)))
    s.claims.allocate(claim(2), allocated(SERIAL, unit(1)))
    await s.preparer.prepare([claim(1), claim(2)])
    doc = json.loads(s.checkpoint.path.read_text())
    kept = doc["claims"][claim(1).uid]["devices"][0]["attributes"]
    assert ["deviceNode0", "string", "/dev/serial/by-id/usb-A0"] in kept
    bad: list[Any] = [["serial", "string", {"nested": "object"}], ["x", "list", []], "loose"]
    for n, attributes in enumerate(bad):
        doc["claims"][claim(2).uid]["devices"][0]["attributes"] = [attributes]
        s.checkpoint.path.write_text(json.dumps(doc))
        again = Checkpoint(s.checkpoint.path)
        again.load()
        assert [p.claim.uid for p in again] == [claim(1).uid], n
        assert again.unaccounted == {claim(2).uid}


async def test_a_checkpoint_naming_paths_outside_is_never_written_or_removed_there(
    base: Path,
) -> None:
    """A checkpoint entry whose namespace climbs out of the metadata directory: the
    restarted driver writes nothing for it, and its unprepare removes nothing there."""
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(1))})
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        await kubelet.prepare_pod(DRIVER, [claim()])
    victim = base / "victim_claim-1"
    victim.mkdir()
    (victim / "keep").write_text("mine")
    checkpoint = base / "plugins" / DRIVER / "checkpoint.json"
    doc = json.loads(checkpoint.read_text())
    doc["claims"][claim().uid]["namespace"] = "../../../victim"
    checkpoint.write_text(json.dumps(doc))
    async with driver(base, MemoryClaims()) as d:
        assert not (victim / "req").exists()
        ref = ClaimRef("../../../victim", "claim-1", claim().uid)
        assert await d.preparer.unprepare([ref]) == {claim().uid: ""}
    assert (victim / "keep").read_text() == "mine"


LONGEST_NAME = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])  # a DNS subdomain: 253


async def test_claims_with_the_longest_valid_names_get_their_metadata(base: Path) -> None:
    """A claim name of 253 characters, in a namespace of 7 and of 63: its files fit in
    file names (cut, with a digest), are mounted, and go at unprepare; a short name
    keeps its readable directory."""
    refs = [
        ClaimRef("default", LONGEST_NAME, "00000001-aaaa-bbbb-cccc-dddddddddddd"),
        ClaimRef("n" * 63, LONGEST_NAME, "00000002-aaaa-bbbb-cccc-dddddddddddd"),
        ClaimRef("default", "claim-3", "00000003-aaaa-bbbb-cccc-dddddddddddd"),
    ]
    claims = MemoryClaims({ref: allocated(SERIAL, unit(n)) for n, ref in enumerate(refs)})
    top = base / "plugins" / DRIVER / "dra-device-metadata"
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        driver(base, claims, unit(0), unit(1), unit(2)),
    ):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        ids = await kubelet.prepare_pod(DRIVER, refs)
        mounts = resolve_cdi(base / "cdi", ids)["mounts"]
        dirs = sorted(p.name for p in top.iterdir())
        assert len(dirs) == len(refs)
        assert all(len(d.encode()) <= 255 for d in dirs)
        assert "default_claim-3" in dirs
        assert sorted(d.split("~")[0][:20] for d in dirs if "~" in d) == [
            "default_aaaaaaaaaaaa",
            "nnnnnnnnnnnnnnnnnnnn",
        ]
        assert {m["hostPath"] for m in mounts} == {str(p) for p in top.glob("*/req/metadata.json")}
        assert all(objects(Path(m["hostPath"]))[0]["kind"] == "DeviceMetadata" for m in mounts)
        await kubelet.unprepare(DRIVER, refs)
        assert list(top.iterdir()) == []
