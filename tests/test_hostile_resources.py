"""Resources that do not fit: long names, colliding names, huge answers, huge requests.

Each case is served through the real supervisor and the embedded kubelet (or
the real CDI directory code) and asserts the exact refusal or that the daemon
copes, never a resource that silently cannot register.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import grpc
import pytest

from genericdp.allocation.cdi import (
    cdi_kind,
    resource_of_kind,
    spec_file_name,
    spec_path,
    write_spec,
)
from genericdp.config.model import Config
from genericdp.deviceplugin.sockets import socket_path
from genericdp.errors import KubeletError
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.metrics import Metrics
from genericdp.runtime.supervisor import Supervisor
from genericdp.unixgrpc import MAX_UNIX_PATH_BYTES
from tests.kubelet_fakes import EmbeddedKubelet
from tests.polling import eventually
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    allocate_request,
    config,
    device_plugin,
    plugin_stub,
    running,
    settings_for,
    unit,
)
from tests.test_cleanup import SERIAL, Hook, serving

LONG = "example.com/" + "a-very-long-resource-name-that-is-legal-" + "x" * 20


# -- unix socket paths are at most 107 bytes --------------------------------------------


async def test_long_resource_name_in_a_long_plugin_dir_registers(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A socket name that would not fit the 107-byte path limit is shortened, and serve says so."""
    plugin_dir = base / ("d" * 60)
    assert len(str(plugin_dir / "kubelet.sock").encode()) <= MAX_UNIX_PATH_BYTES
    discovery = ScriptedDiscovery({LONG: [unit("ttyUSB0")]})
    cfg = config(f"resources:\n- name: {LONG}\n  match: [glob: /dev/ttyUSB*]\n")
    caplog.set_level(logging.INFO)
    async with running(base, cfg, discover=discovery, plugin_dir=plugin_dir) as rt:
        await rt.registered([LONG])
        path = rt.socket(LONG)
        assert len(str(path).encode()) <= MAX_UNIX_PATH_BYTES
        assert path.name.startswith("gdp-")
    assert any("name shortened to fit 107 bytes" in r.getMessage() for r in caplog.records)


def test_socket_names_stay_unique_when_shortened(tmp_path: Path) -> None:
    """Two long names that share a prefix get different shortened socket names."""
    directory = tmp_path / ("d" * max(1, 70 - len(str(tmp_path))))
    a, short_a = socket_path(directory, LONG + "1", "t")
    b, short_b = socket_path(directory, LONG + "2", "t")
    assert short_a
    assert short_b
    assert a != b
    assert max(len(str(a).encode()), len(str(b).encode())) <= MAX_UNIX_PATH_BYTES


def test_plugin_dir_too_long_for_any_socket_is_a_clear_error() -> None:
    """A directory that leaves no room for a socket name is named in the error."""
    directory = Path("/" + "d" * 90)
    with pytest.raises(KubeletError, match=r"too long for a unix socket .* --plugin-dir"):
        socket_path(directory, "example.com/serial")


# -- the kubelet's 4 MiB message limit -----------------------------------------------------

BIG = "example.com/big"


async def test_allocate_answer_over_4_mib_is_refused_and_counted(base: Path) -> None:
    """An answer larger than the kubelet accepts fails in the daemon, counted as refused:
    five containers of about 1 MiB each (the most one allocation may render)."""
    env = "".join(f"      V{i}: \"{{{{ 'x' * 60000 }}}}\"\n" for i in range(17))
    cfg = config(
        f"resources:\n- name: {BIG}\n  match: [glob: /dev/x*]\n  allocate:\n    env:\n{env}"
    )
    settings = settings_for(base)
    metrics = Metrics(process=False)
    units = [f"x{i}" for i in range(5)]
    discovery = ScriptedDiscovery({BIG: [unit(u) for u in units]})
    async with EmbeddedKubelet(settings.plugin_dir) as kubelet:
        backend = device_plugin(settings)
        supervisor = Supervisor(settings, backend, discover=discovery, metrics=metrics)
        await supervisor.start(cfg)
        try:
            rt = Running(kubelet, supervisor, settings, backend)
            await rt.registered([BIG])
            containers = [pb.ContainerAllocateRequest(devices_ids=[u]) for u in units]
            async with plugin_stub(rt.socket(BIG)) as stub:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Allocate(pb.AllocateRequest(container_requests=containers))
        finally:
            assert await supervisor.stop() == ()
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = caught.value.details() or ""
    assert "for 5 container(s)" in details
    assert "over the kubelet's 4194304-byte message limit" in details

    def count(result: str) -> float:
        labels = {"resource": BIG, "result": result}
        return metrics.registry.get_sample_value("genericdp_allocations_total", labels) or 0.0

    assert (count("refused"), count("ok")) == (1.0, 0.0)


# -- a refused Allocate leaves holds and units alone ----------------------------------


@pytest.mark.parametrize("bad", ["nonexistent", "y" * 100_000])
async def test_refused_allocate_neither_cleans_nor_forgets_a_live_hold(
    base: Path, bad: str
) -> None:
    """Allocate naming a held unit plus an unknown ID is refused without cleanup or forgetting."""
    hook = Hook(base / "hook")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    async with serving(base, hook.config(), discovery, poll=0.05) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 2)
        await eventually(lambda: rt.usage.has_baseline)
        answer = await rt.kubelet.allocate(SERIAL, 1, pod="p")
        held = answer.container_responses[0].devices[0].host_path.removeprefix("/dev/")
        await eventually(lambda: rt.usage.listed(SERIAL) == {held})
        async with plugin_stub(rt.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Allocate(allocate_request(held, bad))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert hook.lines("runs") == []
        assert rt.usage.in_use(SERIAL) == {held}
        rt.kubelet.release("default", "p")  # the real release still cleans, once
        await eventually(lambda: hook.lines("done") == [held])


# -- CDI spec files: one per resource, and only ours are ever removed -------------------

GPU_A = "example.com-gpu/render"
GPU_B = "example.com/gpu-render"


def _cdi_config(*names: str) -> Config:
    resources = "".join(
        f"- name: {n}\n  match: [glob: /dev/x*]\n  allocate: {{cdi: true}}\n" for n in names
    )
    return config(f"resources:\n{resources}")


def test_colliding_names_get_their_own_spec_file_and_kind() -> None:
    """Names that read alike once '/' is gone keep distinct files and kinds."""
    pairs = [
        (GPU_A, GPU_B),
        ("3com.example/x", "gdp-3com.example/x"),
        ("example.com/1wire", "example.com/gdp-1wire"),
    ]
    for a, b in pairs:
        assert spec_file_name(a) != spec_file_name(b)
        assert cdi_kind(a) != cdi_kind(b)
        assert resource_of_kind(cdi_kind(a)) == a
        assert resource_of_kind(cdi_kind(b)) == b


async def test_removing_one_resource_keeps_the_others_spec(base: Path) -> None:
    """Resources whose spec names used to collide keep their own spec; removal is per resource."""
    discovery = ScriptedDiscovery({GPU_A: [unit("x0")], GPU_B: [unit("x1")]})
    async with running(base, _cdi_config(GPU_A, GPU_B), discover=discovery) as rt:
        await rt.registered([GPU_A, GPU_B])
        cdi_dir = rt.settings.cdi_dir
        a, b = spec_path(cdi_dir, GPU_A), spec_path(cdi_dir, GPU_B)
        assert json.loads(a.read_text())["devices"][0]["name"] == "x0"
        assert json.loads(b.read_text())["devices"][0]["name"] == "x1"
        await rt.supervisor.apply(_cdi_config(GPU_B))
        assert not a.exists()
        assert json.loads(b.read_text())["devices"][0]["name"] == "x1"


async def test_specs_of_resources_removed_while_down_are_removed_at_start(base: Path) -> None:
    """At start our specs for resources no longer configured go; foreign files stay."""
    cdi_dir = base / "cdi"
    gone = config("resources:\n- name: example.com/gone\n  match: [glob: /dev/x*]\n")
    kept = config("resources:\n- name: example.com/kept\n  match: [glob: /dev/x*]\n")
    write_spec(cdi_dir, gone.resources[0], [unit("x0")])
    write_spec(cdi_dir, kept.resources[0], [unit("x1")])
    foreign = {
        "genericdp-vendor.json": json.dumps({"kind": "vendor.com/thing"}),
        "genericdp-example.com_other.json": json.dumps({"kind": "example.com/not-other"}),
        "genericdp-broken.json": "{not json",
        "nvidia.json": json.dumps({"kind": "nvidia.com/gpu"}),
    }
    for name, text in foreign.items():
        (cdi_dir / name).write_text(text)
    (cdi_dir / "genericdp-example.com_link.json").symlink_to(spec_path(cdi_dir, "example.com/gone"))
    discovery = ScriptedDiscovery({"example.com/kept": [unit("x1")]})
    async with running(base, _cdi_config("example.com/kept"), discover=discovery) as rt:
        await rt.registered(["example.com/kept"])
        left = sorted(p.name for p in cdi_dir.iterdir() if not p.name.startswith("."))
    assert left == sorted(
        [*foreign, "genericdp-example.com_kept.json", "genericdp-example.com_link.json"]
    )
