"""The daemon's runtime against a real embedded kubelet over real unix sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from genericdp.kubelet.embedded.state import EventKind
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import (
    ScriptedDiscovery,
    allocate_request,
    config,
    plugin_stub,
    running,
    unit,
)

SERIAL = "example.com/serial"


def _devices_events(kubelet: EmbeddedKubelet, name: str) -> int:
    return sum(1 for e in kubelet.events if e.kind is EventKind.DEVICES and e.resource == name)


async def test_registers_and_advertises_replicas(base: Path) -> None:
    """Each unit's replicas become capacity and allocatable, with the NUMA node and options."""
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0", numa=1), unit("ttyUSB1")]})
    cfg = config(f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n  count: 2\n")
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].capacity == 4)
        snap = rt.kubelet.resources[SERIAL]
        assert snap.allocatable == 4
        assert snap.devices["ttyUSB0::1"].numa_nodes == (1,)
        assert snap.devices["ttyUSB1::0"].numa_nodes == ()
        assert snap.options is not None
        assert snap.options.get_preferred_allocation_available
        assert not snap.options.pre_start_required
        assert snap.endpoint is not None
        assert snap.endpoint.startswith("gdp-example.com-serial-")
        # The kubelet streams the list before our Register call has its answer.
        await rt.supervisor.wait_for(lambda statuses: statuses[SERIAL].registered)
        assert rt.supervisor.status()[SERIAL].devices == 4


async def test_allocate_renders_devices_env_and_mounts(base: Path) -> None:
    """Allocate answers with the unit's device node, templated env, mounts and annotations."""
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n  permissions: r\n"
        "  allocate:\n"
        "    env: {PORTS: \"{{ devices | map(attribute='path') | join(',') }}\","
        " IDS: \"{{ device_ids | join(',') }}\", NODE: '{{ node_name }}'}\n"
        "    mounts: [{hostPath: '/run/{{ units[0].id }}', containerPath: /run/x,"
        " readOnly: true}]\n"
        "    annotations: {example.com/unit: '{{ units[0].id }}'}\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.registered([SERIAL])
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        response = await rt.kubelet.allocate(SERIAL, 1, pod="p")
        (container,) = response.container_responses
        assert [(d.host_path, d.container_path, d.permissions) for d in container.devices] == [
            ("/dev/ttyUSB0", "/dev/ttyUSB0", "r")
        ]
        assert dict(container.envs) == {"PORTS": "/dev/ttyUSB0", "IDS": "ttyUSB0", "NODE": "node-1"}
        assert [(m.host_path, m.container_path, m.read_only) for m in container.mounts] == [
            ("/run/ttyUSB0", "/run/x", True)
        ]
        assert dict(container.annotations) == {"example.com/unit": "ttyUSB0"}


async def test_preferred_allocation_packed_vs_spread(base: Path) -> None:
    """With two NUMA nodes, packed keeps a request on one node and spread uses both."""
    units = [unit("a0", numa=0), unit("b0", numa=1), unit("a1", numa=0), unit("b1", numa=1)]
    discovery = ScriptedDiscovery({"example.com/packed": units, "example.com/spread": units})
    cfg = config(
        "resources:\n"
        "- {name: example.com/packed, match: [glob: /dev/x*], preferredAllocation: packed}\n"
        "- {name: example.com/spread, match: [glob: /dev/x*], preferredAllocation: spread}\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        names = ["example.com/packed", "example.com/spread"]
        await rt.until(
            lambda k: all(n in k.resources and k.resources[n].allocatable == 4 for n in names)
        )
        numa: dict[str, set[int]] = {}
        for name in names:
            await rt.kubelet.allocate(name, 2, pod=name.split("/")[1])
            snap = rt.kubelet.resources[name]
            numa[name] = {snap.devices[d].numa_nodes[0] for d in snap.allocated}
        assert len(numa["example.com/packed"]) == 1
        assert numa["example.com/spread"] == {0, 1}


async def test_pre_start_hook_runs(base: Path) -> None:
    """A preStart hook makes PreStartContainer required and runs with the device IDs."""
    out = base / "prestart.out"
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"
        "  hooks:\n"
        f"    preStart: {{exec: [/bin/sh, -c, 'echo $GENERICDP_DEVICE_IDS > {out}'],"
        " timeout: 5s}\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        options = rt.kubelet.resources[SERIAL].options
        assert options is not None
        assert options.pre_start_required
        await rt.kubelet.allocate(SERIAL, 1, pod="p")
        assert out.read_text().strip() == "ttyUSB0"


async def test_init_hook_failure_fails_allocate(base: Path) -> None:
    """A failing init hook turns Allocate into an error naming the hook."""
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"
        "  hooks:\n    init: {exec: [/bin/sh, -c, 'echo no port; exit 3'], timeout: 5s}\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.Allocate(allocate_request("ttyUSB0"))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "init hook" in (info.value.details() or "")


async def test_unknown_and_unhealthy_ids_are_rejected(base: Path) -> None:
    """Allocate with unknown or unhealthy IDs fails INVALID_ARGUMENT naming those IDs."""
    flags = base / "flags"
    flags.mkdir()
    (flags / "ttyUSB1").write_text("")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"
        "  health:\n"
        f"    exec: [/bin/sh, -c, 'test ! -e {flags}/$GENERICDP_UNIT_ID']\n"
        "    interval: 1s\n    timeout: 250ms\n    failureThreshold: 1\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].capacity == 2)
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await stub.Allocate(allocate_request("ttyUSB0", "ttyUSB9"))
            with pytest.raises(grpc.aio.AioRpcError) as unhealthy:
                await stub.Allocate(allocate_request("ttyUSB1"))
            ok = await stub.Allocate(allocate_request("ttyUSB0"))
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ttyUSB9" in (unknown.value.details() or "")
        assert unhealthy.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unhealthy" in (unhealthy.value.details() or "")
        assert "ttyUSB1" in (unhealthy.value.details() or "")
        assert ok.container_responses[0].devices[0].host_path == "/dev/ttyUSB0"


async def test_health_flip_changes_allocatable(base: Path) -> None:
    """A probe failing lowers allocatable (capacity stays); passing again restores it."""
    flags = base / "flags"
    flags.mkdir()
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n  count: 2\n"
        "  health:\n"
        f"    exec: [/bin/sh, -c, 'test ! -e {flags}/$GENERICDP_UNIT_ID']\n"
        "    interval: 1s\n    timeout: 250ms\n    failureThreshold: 2\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 4)
        (flags / "ttyUSB1").write_text("")
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 2)
        snap = rt.kubelet.resources[SERIAL]
        assert snap.capacity == 4
        assert not snap.devices["ttyUSB1::0"].healthy
        assert not snap.devices["ttyUSB1::1"].healthy
        (flags / "ttyUSB1").unlink()
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 4)


async def test_a_unit_failing_from_the_start_is_never_advertised_healthy(base: Path) -> None:
    """Units are Unhealthy until their first probe, which runs as they are found, not later."""
    flags = base / "flags"
    flags.mkdir()
    (flags / "ttyUSB1").write_text("")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    cfg = config(
        f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"
        "  health:\n"
        f"    exec: [/bin/sh, -c, 'test ! -e {flags}/$GENERICDP_UNIT_ID']\n"
        "    interval: 1h\n    timeout: 5s\n    failureThreshold: 3\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        # An interval of an hour: only a probe at discovery can make ttyUSB0 allocatable.
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 1)
        discovery.units[SERIAL] = [unit("ttyUSB0"), unit("ttyUSB1"), unit("ttyUSB2")]
        rt.supervisor.rescan("hotplug")
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 2)
        snap = rt.kubelet.resources[SERIAL]
        assert snap.capacity == 3
        assert not snap.devices["ttyUSB1"].healthy
    sent = [e.detail for e in rt.kubelet.events if e.kind is EventKind.DEVICES]
    assert all(not d.startswith(("2 devices, 2 healthy", "3 devices, 3")) for d in sent), sent


async def test_list_and_watch_sends_only_on_change(base: Path) -> None:
    """Rescans that find the same units send nothing; a new unit sends one full list."""
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    cfg = config(f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n")
    async with running(base, cfg, discover=discovery, rescan_interval=0.01) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].capacity == 1)
        await discovery.wait_calls(SERIAL, discovery.calls[SERIAL] + 10)
        assert _devices_events(rt.kubelet, SERIAL) == 1
        discovery.units[SERIAL] = [unit("ttyUSB0"), unit("ttyUSB1")]
        await rt.until(lambda k: k.resources[SERIAL].capacity == 2)
        assert _devices_events(rt.kubelet, SERIAL) == 2


async def test_kubelet_restart_reregisters_within_a_second(base: Path) -> None:
    """After a kubelet restart every resource is registered again within 1 s of kubelet.sock."""
    names = [f"example.com/r{i}" for i in range(5)]
    discovery = ScriptedDiscovery({n: [unit("u0")] for n in names})
    cfg = config(
        "resources:\n" + "".join(f"- {{name: {n}, match: [glob: /dev/u*]}}\n" for n in names)
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.registered(names)
        before = {n: rt.kubelet.resources[n].registrations for n in names}
        old_sockets = {n: rt.socket(n) for n in names}
        await rt.kubelet.stop()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await rt.kubelet.start()  # deletes our sockets, then creates kubelet.sock
        await rt.until(
            lambda k: all(
                k.resources[n].connected and k.resources[n].allocatable == 1 for n in names
            ),
            timeout=5,
        )
        elapsed = loop.time() - started
        assert elapsed < 1.0, f"re-registration took {elapsed:.3f}s"
        for n in names:
            assert rt.kubelet.resources[n].registrations == before[n] + 1  # debounced: once
            assert rt.socket(n) != old_sockets[n]
            assert rt.socket(n).exists()
            assert not old_sockets[n].exists()


async def test_one_broken_resource_does_not_stop_others(base: Path) -> None:
    """A resource whose discovery raises is retried alone; the others register and serve."""
    discovery = ScriptedDiscovery({"example.com/good": [unit("g0")]}, broken={"example.com/bad"})
    cfg = config(
        "resources:\n- {name: example.com/bad, match: [glob: /dev/b*]}\n"
        "- {name: example.com/good, match: [glob: /dev/g*]}\n"
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(
            lambda k: (
                "example.com/good" in k.resources
                and k.resources["example.com/good"].allocatable == 1
            )
        )
        await discovery.wait_calls("example.com/bad", 2)  # retried with backoff
        assert "example.com/bad" not in rt.kubelet.resources
        discovery.broken.clear()
        discovery.units["example.com/bad"] = [unit("b0")]
        await rt.until(
            lambda k: (
                "example.com/bad" in k.resources and k.resources["example.com/bad"].allocatable == 1
            ),
            timeout=10,
        )


async def test_fifty_resources_in_one_process(base: Path) -> None:
    """Fifty resources each get their own socket and all register."""
    names = [f"example.com/dev{i:02d}" for i in range(50)]
    discovery = ScriptedDiscovery({n: [unit("u0"), unit("u1")] for n in names})
    cfg = config(
        "resources:\n" + "".join(f"- {{name: {n}, match: [glob: /dev/u*]}}\n" for n in names)
    )
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(
            lambda k: all(n in k.resources and k.resources[n].allocatable == 2 for n in names),
            timeout=20,
        )
        sockets = {rt.socket(n) for n in names}
        assert len(sockets) == 50
    assert not list((base / "dp").glob("gdp-*.sock"))
