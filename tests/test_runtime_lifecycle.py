"""Runtime lifecycle: real discovery on a fake tree, reconcile on a live kubelet,
a dropped stream, shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import grpc

from genericdp.config.model import Exec, Hooks
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.discovery import discover
from genericdp.grpcservices import Stub, service_handler
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded.state import EventKind
from genericdp.kubelet.options import KUBELET_SOCKET_NAME
from genericdp.runtime.supervisor import Supervisor, all_registered
from tests.fakesys import FakeHost
from tests.runtime_harness import ScriptedDiscovery, config, running, settings_for, unit

SERIAL = "example.com/serial"
_Context = grpc.aio.ServicerContext[object, object]


async def test_config_on_fake_tree(base: Path) -> None:
    """Real discovery on a fake /dev and /sys: one unit per dongle, paths in Allocate."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="AAA", ttys=("ttyUSB0", "ttyUSB1"), numa_node=0)
    host.add_usb_serial("1-3", serial="BBB", ttys=("ttyUSB2",), numa_node=0)
    cfg = config(
        f"resources:\n- name: {SERIAL}\n"
        "  match: [{udev: {subsystem: tty, kernel: 'ttyUSB*'}}]\n"
        "  groupBy: parent:usb\n"
        "  allocate: {env: {PORTS: \"{{ devices | map(attribute='path') | join(',') }}\"}}\n"
    )
    async with running(base, cfg, discover=discover) as rt:
        await rt.until(lambda k: SERIAL in k.resources and k.resources[SERIAL].allocatable == 2)
        response = await rt.kubelet.allocate(SERIAL, 2, pod="p")
        (container,) = response.container_responses
        assert sorted(d.host_path for d in container.devices) == [
            "/dev/ttyUSB0",
            "/dev/ttyUSB1",
            "/dev/ttyUSB2",
        ]
        assert sorted(container.envs["PORTS"].split(",")) == [
            "/dev/ttyUSB0",
            "/dev/ttyUSB1",
            "/dev/ttyUSB2",
        ]


async def test_apply_reconciles_a_running_config(base: Path) -> None:
    """apply: count updates in place, a preStart hook re-registers, removed stop, new start."""
    discovery = ScriptedDiscovery(
        {SERIAL: [unit("u0")], "example.com/old": [unit("o0")], "example.com/new": [unit("n0")]}
    )
    first = config(
        f"resources:\n- {{name: {SERIAL}, match: [glob: /dev/u*]}}\n"
        "- {name: example.com/old, match: [glob: /dev/o*]}\n"
    )
    async with running(base, first, discover=discovery) as rt:
        await rt.registered([SERIAL, "example.com/old"])
        old_socket = rt.socket("example.com/old")
        registrations = rt.kubelet.resources[SERIAL].registrations

        (serial, _) = first.resources
        counted = replace(serial, count=3)
        steps = await rt.supervisor.apply(replace(first, resources=(counted,)))
        assert steps.update == (counted,)
        assert steps.stop == ("example.com/old",)
        await rt.until(lambda k: k.resources[SERIAL].capacity == 3)
        assert rt.kubelet.resources[SERIAL].registrations == registrations  # in place
        assert not old_socket.exists()
        assert "example.com/old" not in rt.supervisor.status()

        hooked = replace(counted, hooks=Hooks(pre_start=Exec(("/bin/true",), 5.0)))
        new = config("resources:\n- {name: example.com/new, match: [glob: /dev/n*]}\n").resources
        steps = await rt.supervisor.apply(replace(first, resources=(hooked, *new)))
        assert steps.renew == (hooked,)
        assert [d.name for d in steps.start] == ["example.com/new"]

        def reregistered(k: object) -> bool:  # noqa: ARG001 -- a wait_until predicate
            snap = rt.kubelet.resources[SERIAL]
            return snap.registrations == registrations + 1 and snap.connected

        await rt.until(reregistered)
        options = rt.kubelet.resources[SERIAL].options
        assert options is not None
        assert options.pre_start_required
        await rt.registered(["example.com/new"])
        assert rt.kubelet.resources[SERIAL].capacity == 3


async def test_shutdown_ends_streams_and_removes_sockets(base: Path) -> None:
    """Stopping the supervisor ends each stream from our side and removes every socket."""
    discovery = ScriptedDiscovery({SERIAL: [unit("u0")]})
    cfg = config(f"resources:\n- {{name: {SERIAL}, match: [glob: /dev/u*]}}\n")
    async with running(base, cfg, discover=discovery) as rt:
        await rt.registered([SERIAL])
        socket = rt.socket(SERIAL)
        assert await rt.supervisor.stop() == ()
        await rt.until(lambda k: not k.resources[SERIAL].connected)
        ended = [e for e in rt.kubelet.events if e.kind is EventKind.STREAM_ENDED]
        assert "closed by the plugin" in ended[-1].detail
        assert not socket.exists()
        assert rt.supervisor.status() == {}


class DroppingKubelet:
    """A kubelet that reads the first ListAndWatch message and hangs up, ``drops`` times."""

    def __init__(self, plugin_dir: Path, drops: int) -> None:
        self.plugin_dir = plugin_dir
        self.drops = drops
        self.endpoints: list[str] = []
        self.changed = asyncio.Event()
        self._kept: list[grpc.aio.Channel] = []

    async def Register(self, request: pb.RegisterRequest, context: _Context) -> pb.Empty:  # noqa: ARG002 -- the gRPC method's signature
        self.endpoints.append(request.endpoint)
        channel = grpc.aio.insecure_channel(f"unix:{self.plugin_dir / request.endpoint}")
        stub = Stub(channel, pb.DESCRIPTOR.services_by_name["DevicePlugin"])
        await stub.GetDevicePluginOptions(pb.Empty())
        call = stub.ListAndWatch(pb.Empty())
        await call.read()
        if len(self.endpoints) <= self.drops:
            call.cancel()
            await channel.close(None)
        else:
            self._kept.append(channel)
        self.changed.set()
        return pb.Empty()

    async def wait_registrations(self, count: int) -> None:
        async with asyncio.timeout(5):
            while len(self.endpoints) < count:
                self.changed.clear()
                await self.changed.wait()

    async def close(self) -> None:
        for channel in self._kept:
            await channel.close(None)


@asynccontextmanager
async def dropping_kubelet(plugin_dir: Path, drops: int) -> AsyncIterator[DroppingKubelet]:
    kubelet = DroppingKubelet(plugin_dir, drops)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [service_handler(pb.DESCRIPTOR.services_by_name["Registration"], kubelet)]
    )
    server.add_insecure_port(f"unix:{plugin_dir / KUBELET_SOCKET_NAME}")
    await server.start()
    try:
        yield kubelet
    finally:
        await kubelet.close()
        await server.stop(None)


async def test_dropped_stream_leads_to_registration(base: Path) -> None:
    """When the kubelet ends our ListAndWatch, the plugin registers again (once)."""
    settings = settings_for(base)
    settings.plugin_dir.mkdir()
    discovery = ScriptedDiscovery({SERIAL: [unit("u0")]})
    cfg = config(f"resources:\n- {{name: {SERIAL}, match: [glob: /dev/u*]}}\n")
    async with dropping_kubelet(settings.plugin_dir, drops=1) as kubelet:
        supervisor = Supervisor(settings, DevicePluginBackend(settings), discover=discovery)
        try:
            await supervisor.start(cfg)
            await kubelet.wait_registrations(2)
            statuses = await supervisor.wait_for(
                lambda s: s[SERIAL].registrations == 2 and s[SERIAL].streams == 1
            )
            assert all_registered()(statuses)
        finally:
            assert await supervisor.stop() == ()
    assert len(kubelet.endpoints) == 2
