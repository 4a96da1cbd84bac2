"""NodePrepareResources / NodeUnprepareResources on our types: hooks, CDI specs,
idempotency, the checkpoint across restarts, and hostile claims."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from genericdp.allocation.cdi import claim_spec_name
from genericdp.config import load
from genericdp.config.model import HealthCheck, Hooks, MountTemplate
from genericdp.discovery import discover
from genericdp.discovery.model import DeviceNode, Roots
from genericdp.dra.checkpoint import PREPARING, Checkpoint
from genericdp.dra.prepare import MAX_DEVICES_PER_CLAIM, MAX_ERROR_CHARS, Preparer
from genericdp.kubeletplugin.claims import AllocatedDevice, Allocation, ClaimError, ClaimRef
from genericdp.kubeletplugin.naming import device_name
from genericdp.settings import Settings
from genericdp.simulate import SIMULATED_CLAIM_UID, AllocationRequest, simulate_dra
from tests.dra_fakes import (
    DRIVER,
    HOOK,
    NODE,
    SERIAL,
    RecordedHooks,
    allocated,
    claim,
    definition,
    setup,
    unit,
)
from tests.fakesys import FakeHost

ALL_HOOKS = Hooks(init=HOOK, pre_start=HOOK, cleanup=HOOK)


async def test_prepare_runs_hooks_writes_the_spec_and_answers_cdi_ids(base: Path) -> None:
    d = definition(
        hooks=ALL_HOOKS,
        env={"PORTS": "{{ devices | map(attribute='container_path') | join(',') }}"},
        mounts=(MountTemplate("/var/lib/serial", "/etc/serial", read_only=True),),
    )
    s = setup(base, [(d, [unit(0), unit(1), unit(2)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0), unit(2)))
    answer = await s.preparer.prepare([claim()])
    result = answer[claim().uid]
    assert result.error == ""
    names = [device_name(SERIAL, "A0"), device_name(SERIAL, "A2")]
    assert [dev.device for dev in result.devices] == names
    assert [dev.cdi_ids for dev in result.devices] == [
        (f"{DRIVER}/claim={claim().uid}-{names[0]}", f"{DRIVER}/claim={claim().uid}_req"),
        (f"{DRIVER}/claim={claim().uid}-{names[1]}",),  # the request's metadata is with the first
    ]
    assert s.hooks.runs == [
        ("init", SERIAL, ("A0", "A2"), tuple(names)),
        ("preStart", SERIAL, ("A0", "A2"), tuple(names)),
    ]
    spec = json.loads((s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).read_text())
    assert spec["kind"] == f"{DRIVER}/claim"
    assert spec["containerEdits"]["env"] == [
        "PORTS=/dev/serial/by-id/usb-A0,/dev/serial/by-id/usb-A2"
    ]
    assert spec["containerEdits"]["mounts"] == [
        {
            "hostPath": "/var/lib/serial",
            "containerPath": "/etc/serial",
            "type": "bind",
            "options": ["rbind", "ro"],
        }
    ]
    assert [dev["containerEdits"].get("deviceNodes") for dev in spec["devices"]] == [
        [{"path": "/dev/serial/by-id/usb-A0", "hostPath": "/dev/ttyUSB0", "permissions": "rw"}],
        [{"path": "/dev/serial/by-id/usb-A2", "hostPath": "/dev/ttyUSB2", "permissions": "rw"}],
        None,  # the device metadata mount of request "req"
    ]
    ids = {i for dev in result.devices for i in dev.cdi_ids}
    assert {f"{spec['kind']}={dev['name']}" for dev in spec["devices"]} == ids


async def test_prepare_again_answers_the_same_without_hooks_or_the_api(base: Path) -> None:
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    first = await s.preparer.prepare([claim()])
    runs, calls = len(s.hooks.runs), s.claims.calls
    again = await s.preparer.prepare([claim(), claim()])
    assert again == first
    assert (len(s.hooks.runs), s.claims.calls) == (runs, calls)


async def test_concurrent_prepares_of_one_claim_run_hooks_once(base: Path) -> None:
    import asyncio

    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    answers = await asyncio.gather(*(s.preparer.prepare([claim()]) for _ in range(5)))
    assert all(a == answers[0] for a in answers)
    assert s.hooks.names() == ["init", "preStart"]


async def test_unprepare_runs_cleanup_removes_the_spec_and_forgets(base: Path) -> None:
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    await s.preparer.prepare([claim()])
    assert await s.preparer.unprepare([claim()]) == {claim().uid: ""}
    assert s.hooks.names() == ["init", "preStart", "cleanup"]
    assert not (s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).exists()
    assert s.checkpoint.get(claim().uid) is None
    # Again, and a claim never seen: success, nothing runs.
    assert await s.preparer.unprepare([claim(), claim(9)]) == {claim().uid: "", claim(9).uid: ""}
    assert s.hooks.names() == ["init", "preStart", "cleanup"]


async def test_a_restarted_daemon_answers_and_unprepares_from_the_checkpoint(base: Path) -> None:
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    first = await s.preparer.prepare([claim()])
    # A new daemon: new inventory (the unit is gone now), hooks, preparer; same files.
    hooks = RecordedHooks()
    t = setup(base, [(definition(hooks=ALL_HOOKS), [])], hooks=hooks)
    assert len(list(t.checkpoint)) == 1
    assert await t.preparer.prepare([claim()]) == first
    assert hooks.runs == []
    assert await t.preparer.unprepare([claim()]) == {claim().uid: ""}
    # The unit is gone: cleanup still gets its nodes as they were at prepare time.
    assert hooks.runs == [("cleanup", SERIAL, ("A0",), (device_name(SERIAL, "A0"),))]
    assert not (t.cdi_dir / claim_spec_name(DRIVER, claim().uid)).exists()


async def test_a_failed_hook_fails_the_claim_and_unprepare_still_cleans(base: Path) -> None:
    hooks = RecordedHooks(fail={"preStart"})
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])], hooks=hooks)
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert "preStart hook failed on purpose" in result.error
    assert claim().name in result.error
    prepared = s.checkpoint.get(claim().uid)
    assert prepared is not None
    assert prepared.state == PREPARING
    assert not (s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).exists()
    # The kubelet retries: the hooks run again, and now they pass.
    hooks.fail.clear()
    assert (await s.preparer.prepare([claim()]))[claim().uid].error == ""
    assert hooks.names() == ["init", "preStart", "init", "preStart"]
    assert await s.preparer.unprepare([claim()]) == {claim().uid: ""}
    assert hooks.names()[-1] == "cleanup"


async def test_a_failed_cleanup_is_reported_and_retried(base: Path) -> None:
    hooks = RecordedHooks(fail={"cleanup"})
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])], hooks=hooks)
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    await s.preparer.prepare([claim()])
    assert "cleanup hook failed" in (await s.preparer.unprepare([claim()]))[claim().uid]
    assert s.checkpoint.get(claim().uid) is not None
    hooks.fail.clear()
    assert await s.preparer.unprepare([claim()]) == {claim().uid: ""}
    assert hooks.names().count("cleanup") == 2


async def test_each_claim_fails_alone(base: Path) -> None:
    other = "example.com/other"
    s = setup(base, [(definition(), [unit(0), unit(1)]), (definition(other), [unit(5)])])
    s.claims.allocate(claim(1), allocated(SERIAL, unit(0)) + allocated(other, unit(5)))
    s.claims.allocate(claim(2), [AllocatedDevice("req", NODE, "serial-nothere")])
    s.claims.allocate(claim(3), allocated(SERIAL, unit(1), pool="node-b"))
    s.claims.allocate(claim(5), [AllocatedDevice("r", NODE, "x" * 100_000)])
    bad_uid = ClaimRef("default", "evil", "../../etc/passwd")
    answer = await s.preparer.prepare([claim(1), claim(2), claim(3), claim(4), claim(5), bad_uid])
    assert answer[claim(1).uid].error == ""
    assert {d.resource for d in answer[claim(1).uid].devices} == {SERIAL, other}
    assert "serial-nothere is not on this node" in answer[claim(2).uid].error
    assert "pool node-b, not in this node's pool node-a" in answer[claim(3).uid].error
    assert "not found" in answer[claim(4).uid].error
    assert len(answer[claim(5).uid].error) < 1000
    assert "is not a UID" in answer[bad_uid.uid].error
    assert s.checkpoint.get(bad_uid.uid) is None
    assert [p.name for p in s.cdi_dir.iterdir()] == [claim_spec_name(DRIVER, claim(1).uid)]


async def test_unhealthy_devices_and_oversized_claims_are_refused(base: Path) -> None:
    s = setup(base, [(definition(health=HealthCheck(HOOK)), [unit(0)])])
    s.inventory.set_health(SERIAL, {"A0"}, {"A0"}, {"A0": "exit 1: cable unplugged"})
    s.claims.allocate(claim(1), allocated(SERIAL, unit(0)))
    s.claims.allocate(claim(2), allocated(SERIAL, unit(0)) * (MAX_DEVICES_PER_CLAIM + 1))
    answer = await s.preparer.prepare([claim(1), claim(2)])
    assert "is not healthy" in answer[claim(1).uid].error
    assert f"more than the {MAX_DEVICES_PER_CLAIM}" in answer[claim(2).uid].error


async def test_a_huge_batch_is_answered_claim_by_claim(base: Path) -> None:
    units = [unit(n) for n in range(50)]
    s = setup(base, [(definition(hooks=ALL_HOOKS), units)])
    claims = [ClaimRef("ns", f"c{n}", f"uid-{n:05d}") for n in range(200)]
    for n, ref in enumerate(claims):
        s.claims.allocate(ref, allocated(SERIAL, units[n % 50]))
    answer = await s.preparer.prepare(claims)
    assert len(answer) == 200
    assert all(r.error == "" for r in answer.values())
    assert len(list(s.cdi_dir.iterdir())) == 200
    assert await s.preparer.unprepare(claims) == {c.uid: "" for c in claims}
    assert list(s.cdi_dir.iterdir()) == []


async def test_a_uid_reused_by_another_claim_is_refused(base: Path) -> None:
    s = setup(base, [(definition(), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    await s.preparer.prepare([claim()])
    impostor = ClaimRef("other", "claim-1", claim().uid)
    assert "prepared here already" in (await s.preparer.prepare([impostor]))[claim().uid].error


async def test_a_checkpoint_that_cannot_be_written_fails_the_claim(base: Path) -> None:
    s = setup(base, [(definition(), [unit(0)])])
    s.claims.allocate(claim(), allocated(SERIAL, unit(0)))
    (base / "plugin").write_text("a file where the directory should be")
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert "cannot write the DRA checkpoint" in result.error
    assert s.checkpoint.get(claim().uid) is None


def test_hostile_checkpoints_load_as_empty_or_in_part(base: Path) -> None:
    path = base / "checkpoint.json"
    good = {
        "namespace": "ns",
        "name": "n",
        "state": "prepared",
        "spec": "gdp-claim-genericdp.io_uid-1.json",
        "devices": [],
    }
    cases: list[tuple[bytes, int]] = [
        (b"", 0),
        (b"\x00\xff not json", 0),
        (b"[" * 100_000, 0),
        (json.dumps({"version": 99, "claims": {}}).encode(), 0),
        (json.dumps({"version": 1, "claims": []}).encode(), 0),
        (
            json.dumps(
                {
                    "version": 1,
                    "claims": {
                        "uid-1": good,
                        "../x": good,
                        "uid-2": {**good, "state": "weird"},
                        "uid-3": {**good, "devices": [{"request": 1}]},
                        "uid-4": {**good, "spec": "../../etc/passwd"},
                        "uid-5": "nope",
                    },
                }
            ).encode(),
            1,
        ),
    ]
    for data, kept in cases:
        path.write_bytes(data)
        checkpoint = Checkpoint(path)
        checkpoint.load()
        assert len(list(checkpoint)) == kept, data[:60]


class ChattySource:
    """A claim source whose errors are huge, or not ClaimErrors at all."""

    async def allocation(self, claim: ClaimRef) -> Allocation:
        if claim.name == "claim-1":
            raise ClaimError("x" * 1_000_000)
        raise RuntimeError("the client library broke")


async def test_a_claim_source_that_misbehaves_fails_its_claims_briefly(base: Path) -> None:
    s = setup(base, [(definition(), [unit(0)])])
    preparer = Preparer(
        driver=DRIVER,
        inventory=s.inventory,
        claims=ChattySource(),
        checkpoint=s.checkpoint,
        cdi_dir=s.cdi_dir,
        run_hook=s.hooks,
    )
    answer = await preparer.prepare([claim(1), claim(2)])
    assert len(answer[claim(1).uid].error) < MAX_ERROR_CHARS + 100
    assert "internal error: the client library broke" in answer[claim(2).uid].error


async def test_a_device_named_by_two_requests_is_one_cdi_device(base: Path) -> None:
    s = setup(base, [(definition(hooks=ALL_HOOKS), [unit(0)])])
    name = device_name(SERIAL, "A0")
    s.claims.allocate(claim(), [AllocatedDevice("a", NODE, name), AllocatedDevice("b", NODE, name)])
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert [(d.request, d.device) for d in result.devices] == [("a", name), ("b", name)]
    spec = json.loads((s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).read_text())
    assert [d["name"] for d in spec["devices"] if "deviceNodes" in d["containerEdits"]] == [
        f"{claim().uid}-{name}"
    ]
    # The unit once, as under the device plugin two replica IDs of one unit are one unit.
    assert s.hooks.runs[0][2] == ("A0",)


async def test_allocate_devices_nodes_are_in_every_prepared_device(base: Path) -> None:
    """A resource's ``allocate.devices`` nodes (``Unit.shared``) reach the claim, as
    under the device plugin: a GPU without ``/dev/nvidiactl`` is no GPU."""
    ctl = DeviceNode("/dev/gdp-ctl", "/dev/gdp-ctl", permissions="r")
    d = definition()
    units = [replace(unit(0), shared=(ctl,)), replace(unit(1), shared=(ctl,))]
    s = setup(base, [(d, units)])
    s.claims.allocate(claim(), allocated(SERIAL, *units))
    assert (await s.preparer.prepare([claim()]))[claim().uid].error == ""
    spec = json.loads((s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).read_text())
    for device in spec["devices"]:
        if "mounts" in device["containerEdits"]:
            continue  # the device metadata's mount
        assert {"path": "/dev/gdp-ctl", "hostPath": "/dev/gdp-ctl", "permissions": "r"} in device[
            "containerEdits"
        ]["deviceNodes"]


async def test_two_nodes_at_one_container_path_are_refused(base: Path) -> None:
    """A claim whose devices would put two host nodes at one container path fails
    (as Allocate does): the container would silently get only one of them."""
    fixed = DeviceNode("/dev/ttyUSB0", "/dev/serial0")
    other = DeviceNode("/dev/ttyUSB1", "/dev/serial0")
    units = [replace(unit(0), nodes=(fixed,)), replace(unit(1), nodes=(other,))]
    s = setup(base, [(definition(hooks=ALL_HOOKS), units)])
    s.claims.allocate(claim(), allocated(SERIAL, *units))
    result = (await s.preparer.prepare([claim()]))[claim().uid]
    assert "would both be /dev/serial0 in the container" in result.error
    assert s.hooks.runs == []
    assert s.checkpoint.get(claim().uid) is None
    assert not (s.cdi_dir / claim_spec_name(DRIVER, claim().uid)).exists()


SIMULATED = """\
version: v1
resources:
  - name: example.com/serial
    match: [{glob: /dev/ttyUSB*}]
    allocate:
      env: {PORTS: "{{ device_ids | join(',') }}"}
      mounts: [{hostPath: /run/serial, containerPath: /run/serial, readOnly: true}]
      annotations: {example.com/note: "{{ units | length }}"}
"""


async def test_simulate_shows_the_spec_and_ids_prepare_makes(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``simulate --backend dra`` prints the CDI spec and IDs prepare writes and
    answers for the same claim, and its prepare logs that annotations are not passed."""
    host = FakeHost(base / "host")
    for n in range(3):
        host.add_plain(f"/dev/ttyUSB{n}")
    path = base / "c.yaml"
    path.write_text(SIMULATED)
    settings = Settings.model_validate(
        {"dev_root": host.dev, "sys_root": host.sys, "udev_root": host.udev, "node_name": NODE}
    )
    out = io.StringIO()
    requests = [AllocationRequest(SERIAL, 2)]
    assert await simulate_dra(path, settings, driver=DRIVER, requests=requests, out=out) == 0
    shown = out.getvalue()
    warning = f"resource {SERIAL}: allocate.annotations (example.com/note) are not passed under DRA"
    spec_text = shown.split("and writes this CDI spec", 1)[1].split(":\n", 1)[1]
    spec_text, metadata_text = spec_text.split("  and this device metadata", 1)
    shown_spec = json.loads(spec_text)

    (d,) = load([path]).resources
    units = discover(d, Roots(dev=host.dev, sys=host.sys, udev=host.udev))
    first = sorted(units, key=lambda u: device_name(SERIAL, u.id))[:2]
    s = setup(base, [(d, units)])
    ref = ClaimRef("default", "simulated", SIMULATED_CLAIM_UID)
    s.claims.allocate(ref, allocated(SERIAL, *first))
    result = (await s.preparer.prepare([ref]))[ref.uid]
    assert result.error == ""
    written = json.loads((s.cdi_dir / claim_spec_name(DRIVER, ref.uid)).read_text())
    # The metadata mount's host file is under the plugins dir of each.
    mounted = [
        d["containerEdits"]["mounts"][0]
        for d in (written, shown_spec)
        for d in d["devices"]
        if "mounts" in d["containerEdits"]
    ]
    assert mounted[0].pop("hostPath").startswith(str(s.checkpoint.path.parent))
    assert mounted[1].pop("hostPath").startswith(str(settings.dra_plugins_dir / DRIVER))
    assert written == shown_spec
    where = "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/simulated/req/"
    assert metadata_text.startswith(f", which the container reads at {where}{DRIVER}-metadata.json")
    assert '"apiVersion": "metadata.resource.k8s.io/v1beta1"' in metadata_text
    ids = ", ".join(dict.fromkeys(i for dev in result.devices for i in dev.cdi_ids))
    assert f"prepare answers the CDI devices {ids}\n" in shown
    assert warning in caplog.text
    assert shown_spec["containerEdits"]["env"] == [
        "PORTS=" + ",".join(device_name(SERIAL, u.id) for u in first)
    ]
