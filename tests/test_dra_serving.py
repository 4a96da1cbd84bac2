"""The whole DRA node side against a real kube-apiserver: serving() with its API
pieces, the supervisor's runners, the embedded DRA kubelet preparing claims
allocated in the API server, and the slices left in place at shutdown."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.config import load
from genericdp.dra.backend import serving
from genericdp.dra.embedded import resolve_cdi
from genericdp.hooks import HookRun
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER, device_name
from genericdp.kubeletplugin.slices import SHARES_CAPACITY, SLICE_LABEL
from genericdp.runtime.supervisor import Supervisor
from genericdp.simulate import simulate_dra
from tests.apiserver import ApiServer
from tests.dra_claims import allocated_claim
from tests.dra_kubelet import EmbeddedDraKubelet
from tests.fakesys import FakeHost
from tests.polling import eventually
from tests.runtime_harness import ScriptedDiscovery, config, settings_for, unit

NAME = "example.com/serial"
NODE = "dra-serving-node"
CONFIG = f"""resources:
- name: {NAME}
  match: [glob: /dev/ttyUSB*]
  allocate:
    env: {{SERIAL: "{{{{ units[0].id }}}}"}}
  hooks:
    init: {{exec: [/bin/true]}}
    cleanup: {{exec: [/bin/true]}}
"""


def slices(apiserver: ApiServer) -> list[dict[str, Any]]:
    found = json.loads(apiserver.kubectl("get", "resourceslices", "-o", "json"))["items"]
    return [s for s in found if s["spec"].get("nodeName") == NODE]


def device_names(apiserver: ApiServer) -> set[str]:
    return {d["name"] for s in slices(apiserver) for d in s["spec"]["devices"]}


async def test_claims_allocated_in_the_api_server_are_prepared(
    apiserver: ApiServer, base: Path
) -> None:
    hooks: list[HookRun] = []

    async def run_hook(hook: HookRun) -> None:
        hooks.append(hook)

    settings = settings_for(
        base,
        backend="dra",
        node_name=NODE,
        kubeconfig=str(apiserver.kubeconfig),
        dra_registration_dir=base / "registry",
        dra_plugins_dir=base / "plugins",
    )
    discovery = ScriptedDiscovery({NAME: [unit("ttyUSB0"), unit("ttyUSB1")]})
    usb0 = device_name(NAME, "ttyUSB0")
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        serving(settings, run_hook=run_hook) as dra,
    ):
        supervisor = Supervisor(settings, dra, discover=discovery, run_hook=run_hook)
        await supervisor.start(config(CONFIG))
        try:
            await kubelet.wait_until(lambda k: k.registered(DEFAULT_DRIVER))
            await eventually(
                lambda: device_names(apiserver) == {usb0, device_name(NAME, "ttyUSB1")},
                "the slice in the API server",
            )
            times = []
            for n in range(10):
                ref = allocated_claim(apiserver, f"serving-{n}", usb0, node=NODE)
                started = time.perf_counter()
                ids = await kubelet.prepare_pod(DEFAULT_DRIVER, [ref])
                times.append(time.perf_counter() - started)
                assert resolve_cdi(settings.cdi_dir, ids)["env"] == ["SERIAL=ttyUSB0"]
                await kubelet.unprepare(DEFAULT_DRIVER, [ref])
            times.sort()
            print(
                f"\nprepare with the claim from the API server: median"
                f" {times[5] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
            )
            assert [h.name for h in hooks][:2] == ["init", "cleanup"]
        finally:
            supervisor.shutting_down()
            await supervisor.stop()
    # Stopped: the slices stay for the next instance.
    assert len(slices(apiserver)) == 1


STARTUP_NODE = "dra-startup-node"
STARTUP_RESOURCES = [f"example.com/start{i}" for i in range(8)]
STARTUP_CONFIG = "resources:\n" + "".join(
    f"- name: {name}\n  match: [glob: /dev/ttyUSB*]\n" for name in STARTUP_RESOURCES
)


async def test_slices_are_complete_within_a_second_of_start_and_a_restart_writes_nothing(
    apiserver: ApiServer, base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Start to every device in the API server, in one generation; a restart takes over."""
    settings = settings_for(
        base,
        backend="dra",
        node_name=STARTUP_NODE,
        kubeconfig=str(apiserver.kubeconfig),
        dra_registration_dir=base / "registry",
        dra_plugins_dir=base / "plugins",
    )
    (base / "host" / "dev").mkdir(parents=True)
    units = [unit("ttyUSB0"), unit("ttyUSB1")]
    discovery = ScriptedDiscovery(dict.fromkeys(STARTUP_RESOURCES, units))
    wanted = {device_name(name, u.id) for name in STARTUP_RESOURCES for u in units}

    async def run_once() -> tuple[float, int]:
        """Seconds from start to the slices holding every device; slices the first
        write took (the publisher's line; a later write would raise the generation)."""
        started = time.monotonic()
        async with serving(settings, run_hook=_no_hook) as dra:
            supervisor = Supervisor(settings, dra, discover=discovery)
            await supervisor.start(config(STARTUP_CONFIG))
            try:
                # The publisher's line once the pool is right, written or found so.
                done = f"node {STARTUP_NODE} up to date"
                complete = f": {len(wanted)} device(s) of {len(STARTUP_RESOURCES)} resource(s)"
                await eventually(
                    lambda: any(done in m and complete in m for m in caplog.messages),
                    f"every device in the slices ({done}...{complete} in the log)",
                )
                elapsed = time.monotonic() - started
                (line,) = [m for m in caplog.messages if done in m]
                written = re.search(r"(\d+) slice\(s\) written", line)
                assert written is not None, line
                return elapsed, int(written[1])
            finally:
                supervisor.shutting_down()
                await supervisor.stop()

    with caplog.at_level(logging.INFO, "genericdp.kubeletplugin.publisher"):
        first, written = await run_once()
        held = startup_slices(apiserver)
        assert {d["name"] for s in held for d in s["spec"]["devices"]} == wanted
        # One write per resource's slice, all of one generation: not one pool per scan.
        assert written == len(STARTUP_RESOURCES)
        assert {s["spec"]["pool"]["generation"] for s in held} == {1}
        caplog.clear()
        again, rewritten = await run_once()
    print(f"\nDRA start -> slices complete: {first:.3f}s; restart -> taken over: {again:.3f}s")
    assert rewritten == 0
    assert {s["spec"]["pool"]["generation"] for s in startup_slices(apiserver)} == {1}
    assert [s["metadata"]["uid"] for s in startup_slices(apiserver)] == [
        s["metadata"]["uid"] for s in held
    ]
    # Before the fix, 6 s (every first publish waited for PodResources, which the
    # DRA backend never polls) plus a fixed 0.5 s takeover delay.
    assert first < 1.0
    assert again < 1.0


def startup_slices(apiserver: ApiServer) -> list[dict[str, Any]]:
    found = json.loads(apiserver.kubectl("get", "resourceslices", "-o", "json"))["items"]
    mine = [s for s in found if s["spec"].get("nodeName") == STARTUP_NODE]
    return sorted(mine, key=lambda s: str(s["metadata"]["name"]))


async def _no_hook(hook: HookRun) -> None:
    """Hooks are not what this test is about."""


SHARED_NODE = "dra-simulated-node"
SHARED_CONFIG = """\
version: v1
resources:
- name: example.com/shared
  match: [glob: /dev/kvm*]
  count: 4
- name: example.com/any
  match: [glob: /dev/tun*]
  count: unbounded
- name: example.com/serial
  match: [udev: {subsystem: tty, kernel: "ttyUSB*"}]
  dra: {attributes: {model: FT232R}, taintEffect: NoExecute}
"""


def _slice(obj: dict[str, Any]) -> dict[str, Any]:
    """A ResourceSlice without what the API server fills in (its name, uid,
    resourceVersion, ...): the slices are told apart by their label."""
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"labels": obj["metadata"]["labels"]},
        "spec": obj["spec"],
    }


async def test_simulate_shows_the_slices_serve_publishes(apiserver: ApiServer, base: Path) -> None:
    """``simulate --backend dra`` prints the pool ``serve`` writes to the API server: the
    same slices, each device with the sharing (``count: 4``: allowMultipleAllocations and
    four shares; ``count: unbounded``: the flag) and attributes serve publishes."""
    host = FakeHost(base / "host")
    host.add_plain("/dev/kvm0")
    host.add_plain("/dev/kvm1")
    host.add_plain("/dev/tun0")
    host.add_usb_serial(port="1-2", serial="AAA111", ttys=("ttyUSB0",))
    path = base / "shared.yaml"
    path.write_text(SHARED_CONFIG)
    settings = settings_for(
        base,
        backend="dra",
        node_name=SHARED_NODE,
        kubeconfig=str(apiserver.kubeconfig),
        dev_root=host.dev,
        sys_root=host.sys,
        udev_root=host.udev,
        dra_registration_dir=base / "registry",
        dra_plugins_dir=base / "plugins",
    )
    out = io.StringIO()
    assert await simulate_dra(path, settings, driver=DEFAULT_DRIVER, out=out) == 0
    printed = out.getvalue().split("ResourceSlices (3):\n", 1)[1].split("\nclaim for", 1)[0]
    # By key: the API server names the slices (generateName).
    simulated = {
        s["metadata"]["labels"][SLICE_LABEL]: _slice(s)
        for s in YAML(typ="safe", pure=True).load_all(printed)
        if s
    }
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        serving(settings, run_hook=_no_hook) as dra,
    ):
        supervisor = Supervisor(settings, dra, run_hook=_no_hook)
        await supervisor.start(load([path]))
        try:
            await kubelet.wait_until(lambda k: k.registered(DEFAULT_DRIVER))

            def published() -> dict[str, Any]:
                found = json.loads(apiserver.kubectl("get", "resourceslices", "-o", "json"))
                return {
                    s["metadata"]["labels"][SLICE_LABEL]: _slice(s)
                    for s in found["items"]
                    if s["spec"].get("nodeName") == SHARED_NODE
                }

            await eventually(lambda: len(published()) == 3, "the pool in the API server")
            assert published() == simulated
        finally:
            supervisor.shutting_down()
            await supervisor.stop()
    devices = {d["name"].split("-")[0]: d for s in simulated.values() for d in s["spec"]["devices"]}
    assert devices["shared"].get("allowMultipleAllocations") is True
    assert devices["shared"]["capacity"][SHARES_CAPACITY]["value"] == "4"
    assert devices["any"].get("allowMultipleAllocations") is True
    assert "allowMultipleAllocations" not in devices["serial"]
