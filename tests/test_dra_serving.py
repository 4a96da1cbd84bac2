"""The whole DRA node side against a real kube-apiserver: serving() with its API
pieces, the supervisor's runners, the embedded DRA kubelet preparing claims
allocated in the API server, and the slices left in place at shutdown."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from genericdp.dra.backend import serving
from genericdp.dra.claims import ClaimRef
from genericdp.dra.embedded import EmbeddedDraKubelet, resolve_cdi
from genericdp.dra.naming import DEFAULT_DRIVER, device_name
from genericdp.hooks import HookRun
from genericdp.runtime.supervisor import Supervisor
from tests.apiserver import ApiServer
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


def allocated_claim(apiserver: ApiServer, name: str, device: str) -> ClaimRef:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {"requests": [{"name": "serial", "exactly": {"deviceClassName": "serial"}}]}
        },
    }
    created = json.loads(
        apiserver.kubectl("create", "-o", "json", "-f", "-", input_text=json.dumps(claim))
    )
    result = {"request": "serial", "driver": DEFAULT_DRIVER, "pool": NODE, "device": device}
    status = {"status": {"allocation": {"devices": {"results": [result]}}}}
    apiserver.kubectl(
        "patch", "resourceclaim", name, "-n", "default", "--subresource=status",
        "--type=merge", "-p", json.dumps(status),
    )  # fmt: skip
    return ClaimRef("default", name, created["metadata"]["uid"])


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
        supervisor = Supervisor(
            settings,
            discover=discovery,
            run_hook=run_hook,
            edge=dra.edge,
            device_plugin_api=False,
        )
        await supervisor.start(config(CONFIG))
        try:
            await eventually(lambda: kubelet.registered(DEFAULT_DRIVER), "registered")
            await eventually(
                lambda: device_names(apiserver) == {usb0, device_name(NAME, "ttyUSB1")},
                "the slice in the API server",
            )
            times = []
            for n in range(10):
                ref = allocated_claim(apiserver, f"serving-{n}", usb0)
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
            dra.stopping = True
            await supervisor.stop()
    # Stopped: the slices stay for the next instance.
    assert len(slices(apiserver)) == 1
