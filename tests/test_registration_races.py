"""Registration against a restarting, racing kubelet (issue 7, highest priority).

Kubelets up to 1.32 keep one client per resource name. When the dial-back of
a Register fails (after 10 s), they delete whichever client has that name,
a newer live registration included, and then never notice its stream ending:
its devices stay allocatable with no plugin behind them. The first tests show
the embedded kubelet doing exactly that; the others hold the daemon to what
it guarantees: at most one Register in flight, never naming a socket that is
not ours and serving, one ListAndWatch stream per resource, only the
kubelet's stream ending triggers a new Register, and every resource back
within a second of each crash-style kubelet restart.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from genericdp.config.model import Config
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.errors import RegistrationError
from genericdp.grpcservices import Stub, service_handler
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.embedded import AllocationError, EventKind
from genericdp.kubelet.options import (
    KUBELET_DIAL_TIMEOUT,
    KUBELET_SOCKET_NAME,
    REGISTER_TIMEOUT,
    PluginOptions,
)
from genericdp.kubelet.registration import register
from genericdp.runtime.supervisor import Supervisor, all_registered
from tests.kubelet_fakes import (
    SERIAL,
    EmbeddedKubelet,
    FakePlugin,
    registered,
    serving,
    three_devices,
)
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    config,
    plugin_stub,
    running,
    settings_for,
    unit,
)

# -- the embedded kubelet models the real one -----------------------------------------


async def test_failed_dial_back_deregisters_a_newer_registration_by_name(base: Path) -> None:
    """A Register whose dial-back fails removes the newer live client; its end goes unnoticed."""
    async with EmbeddedKubelet(base / "dp", dial_timeout=0.5) as kubelet:
        stale = asyncio.create_task(
            register(
                kubelet.socket, endpoint="gone.sock", resource_name=SERIAL, options=PluginOptions()
            )
        )
        await kubelet.wait_until(lambda k: _count(k, EventKind.DIALING) == 1)
        plugin = FakePlugin(three_devices())
        async with registered(kubelet, plugin, endpoint="live.sock"):
            await kubelet.wait_until(lambda k: k.resources[SERIAL].allocatable == 2)
            with pytest.raises(RegistrationError, match="failed to dial device plugin"):
                await stale
            assert kubelet.problems() == [
                (
                    f"{SERIAL}: dial-back of gone.sock failed; removed the client of live.sock "
                    "registered meanwhile"
                ),
                f"{SERIAL}: the end of live.sock's stream would go unnoticed",
            ]
        # The plugin is gone, but the kubelet did not notice: still allocatable.
        await kubelet.wait_until(lambda k: _count(k, EventKind.STREAM_UNNOTICED) == 1)
        snap = kubelet.resources[SERIAL]
        assert (snap.connected, snap.allocatable) == (True, 2)
        with pytest.raises(AllocationError, match="No such file or directory"):
            await kubelet.allocate(SERIAL, 1, pod="victim")


class GatedPlugin(FakePlugin):
    """Answers GetDevicePluginOptions only once ``gate`` is set (the kubelet waits forever)."""

    def __init__(self) -> None:
        super().__init__(three_devices())
        self.gate = asyncio.Event()

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[object, object]
    ) -> object:
        await self.gate.wait()
        return await super().GetDevicePluginOptions(request, context)


async def test_crash_during_register_voids_it_and_the_restart_deletes_the_socket(
    base: Path,
) -> None:
    """A Register in flight dies with a crashed kubelet; the next start deletes its socket."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        plugin = GatedPlugin()
        socket = kubelet.plugin_dir / "p.sock"
        async with serving(plugin, socket):
            call = asyncio.create_task(
                register(
                    kubelet.socket, endpoint="p.sock", resource_name=SERIAL, options=PluginOptions()
                )
            )
            await kubelet.wait_until(lambda k: _count(k, EventKind.DIALING) == 1)
            await kubelet.crash()
            assert kubelet.socket.exists()  # a killed kubelet leaves its socket behind
            with pytest.raises(RegistrationError):
                await call
            await kubelet.start()
            assert not socket.exists()  # deleted by the new kubelet before it listened
            plugin.gate.set()
        assert SERIAL not in kubelet.resources
        assert kubelet.problems() == []
        assert _count(kubelet, EventKind.REGISTERED) == 0


def test_register_outlasts_the_kubelets_dial_back() -> None:
    """The daemon never gives up on a Register the kubelet is still dialing back for."""
    assert REGISTER_TIMEOUT > KUBELET_DIAL_TIMEOUT


# -- the daemon against it -------------------------------------------------------------

A, B = "example.com/a", "example.com/b"


def _count(kubelet: EmbeddedKubelet, kind: EventKind, resource: str | None = None) -> int:
    return sum(
        1 for e in kubelet.events if e.kind is kind and (resource is None or e.resource == resource)
    )


def _cfg(names: Sequence[str]) -> Config:
    return config(
        "resources:\n" + "".join(f"- {{name: {n}, match: [glob: /dev/u*]}}\n" for n in names)
    )


def sound(rt: Running, names: Sequence[str]) -> Callable[[EmbeddedKubelet], bool]:
    """Every resource registered once, on the daemon's live socket, one stream, all healthy."""

    def check(k: EmbeddedKubelet) -> bool:
        statuses = rt.supervisor.status()
        for name in names:
            snap = k.resources.get(name)
            status = statuses.get(name)
            if snap is None or status is None or status.socket is None:
                return False
            if not (snap.connected and snap.allocatable == 1 and snap.streams == 1):
                return False
            if snap.endpoint != status.socket.name or not status.registered:
                return False
        return not k.problems()

    return check


def _serving(rt: Running, name: str) -> Path | None:
    return rt.supervisor.status()[name].socket  # None while it changes


async def test_socket_replaced_by_a_regular_file_is_recovered(base: Path) -> None:
    """A regular file put where our socket was is not our socket: serve anew and register."""
    discovery = ScriptedDiscovery({A: [unit("u0")]})
    async with running(base, _cfg([A]), discover=discovery) as rt:
        await rt.until(sound(rt, [A]))
        old = rt.socket(A)
        old.unlink()
        old.write_text("not a socket\n")
        await rt.until(
            lambda k: _serving(rt, A) not in (None, old) and sound(rt, [A])(k), timeout=2
        )
        # And a kubelet restart (which leaves regular files alone) still finds us.
        await rt.kubelet.restart(crash=True)
        await rt.until(sound(rt, [A]), timeout=2)
        assert not any("failed to dial" in e.detail for e in rt.kubelet.events)


async def test_socket_removed_by_someone_else_is_recovered(base: Path) -> None:
    """Our socket deleted by a third party: a fresh socket is registered, nothing stale left."""
    discovery = ScriptedDiscovery({A: [unit("u0")]})
    async with running(base, _cfg([A]), discover=discovery) as rt:
        await rt.until(sound(rt, [A]))
        old = rt.socket(A)
        old.unlink()
        await rt.until(
            lambda k: _serving(rt, A) not in (None, old) and sound(rt, [A])(k), timeout=2
        )


async def test_other_clients_dropping_list_and_watch_do_not_reregister(base: Path) -> None:
    """Only the kubelet's stream ending leads to Register; a tool's dropped stream does not."""
    discovery = ScriptedDiscovery({A: [unit("u0")]})
    async with running(base, _cfg([A]), discover=discovery) as rt:
        await rt.until(sound(rt, [A]))
        dialed = _count(rt.kubelet, EventKind.DIALING, A)
        for _ in range(3):
            async with plugin_stub(rt.socket(A)) as stub:
                call = stub.ListAndWatch(pb.Empty())
                await call.read()
                call.cancel()
        await rt.supervisor.wait_for(lambda s: s[A].streams == 1)
        # Nothing may happen now: give a wrong re-registration ample time to show
        # (20x the settle delay), then check that none did.
        with pytest.raises(TimeoutError):
            await rt.until(lambda k: _count(k, EventKind.DIALING, A) > dialed, timeout=1.0)
        assert sound(rt, [A])(rt.kubelet)
        # The kubelet's own stream ending still does.
        await rt.kubelet.restart(crash=True)
        await rt.until(sound(rt, [A]), timeout=2)


async def test_late_kubelet_sock_events_do_not_register_twice(base: Path) -> None:
    """A ``kubelet.sock created`` seen after we registered with that kubelet changes nothing."""
    discovery = ScriptedDiscovery({A: [unit("u0")]})
    async with running(base, _cfg([A]), discover=discovery) as rt:
        await rt.until(sound(rt, [A]))
        kubelet_sock = rt.kubelet.socket
        aside = kubelet_sock.with_name("aside")
        for _ in range(3):  # the same listening socket, seen as created again
            kubelet_sock.rename(aside)
            aside.rename(kubelet_sock)
        with pytest.raises(TimeoutError):
            await rt.until(lambda k: _count(k, EventKind.DIALING, A) > 1, timeout=1.0)
        assert rt.kubelet.resources[A].registrations == 1
        assert sound(rt, [A])(rt.kubelet)


# -- crash-style restarts at random moments ----------------------------------------


@dataclass
class RestartReport:
    restarts: int = 0
    measured: list[float] = field(default_factory=list)  # seconds until every resource is back

    def summary(self) -> str:
        ms = sorted(t * 1000 for t in self.measured)
        return (
            f"{self.restarts} restarts, {len(ms)} measured: p50 {statistics.median(ms):.1f} ms, "
            f"p99 {ms[int(len(ms) * 0.99) - 1]:.1f} ms, max {ms[-1]:.1f} ms"
        )


async def crash_restarts(rt: Running, names: Sequence[str], count: int, seed: int) -> RestartReport:
    """Crash and restart the kubelet ``count`` times, each at a random moment.

    Half of the new kubelets start up to 80 ms after the crash, while the
    daemon is trying the dead one's socket. A quarter of the restarts wait for
    full recovery and are timed; the others come at once (Registers still in
    flight), at the moment the kubelet is dialing a plugin back, or a few
    milliseconds later.
    """
    rng = random.Random(seed)  # noqa: S311 -- a reproducible schedule, not a secret
    kubelet = rt.kubelet
    loop = asyncio.get_running_loop()
    report = RestartReport()
    for _ in range(count):
        await kubelet.crash()
        if rng.random() < 0.5:  # dead for a while: the daemon tries the stale kubelet.sock
            await asyncio.sleep(rng.uniform(0, 0.08))
        started = loop.time()
        await kubelet.start()
        report.restarts += 1
        moment = rng.randrange(4)
        if moment == 0:
            await rt.until(sound(rt, names), timeout=1.0)
            report.measured.append(loop.time() - started)
            assert kubelet.problems() == []
        elif moment == 1:
            await rt.until(_dialing_after(_count(kubelet, EventKind.DIALING)))
        elif moment == 2:
            await asyncio.sleep(rng.uniform(0, 0.01))  # a random moment, not a wait for behaviour
    started = loop.time()
    await rt.until(sound(rt, names), timeout=1.0)
    report.measured.append(loop.time() - started)
    return report


def _dialing_after(seen: int) -> Callable[[EmbeddedKubelet], bool]:
    return lambda k: _count(k, EventKind.DIALING) > seen


def assert_no_stale_or_duplicate(kubelet: EmbeddedKubelet) -> None:
    """No Register named a dead socket, none removed another, one Register per kubelet life."""
    assert kubelet.problems() == []
    assert [e for e in kubelet.events if "failed to dial" in e.detail] == []
    per_life: dict[str, int] = {}
    for event in kubelet.events:
        if event.kind is EventKind.STARTED:
            per_life = {}
        elif event.kind is EventKind.REGISTERED:
            per_life[event.resource] = per_life.get(event.resource, 0) + 1
            assert per_life[event.resource] == 1, f"registered twice with one kubelet: {event}"


async def _run_restarts(base: Path, count: int, seed: int) -> RestartReport:
    names = [A, B]
    discovery = ScriptedDiscovery({n: [unit("u0")] for n in names})
    async with running(base, _cfg(names), discover=discovery) as rt:
        await rt.until(sound(rt, names))
        report = await crash_restarts(rt, names, count, seed)
        assert_no_stale_or_duplicate(rt.kubelet)
        assert max(report.measured) < 1.0, report.summary()
        print(report.summary())
        return report


async def test_crash_restarts_at_random_moments(base: Path) -> None:
    """150 crash-style restarts, some during a Register: none stale or duplicate, back < 1 s."""
    await _run_restarts(base, 150, seed=7)


@pytest.mark.soak
async def test_thousand_crash_restarts(base: Path) -> None:
    """1000 crash-style restarts: nothing stale, no duplicate, every resource back < 1 s."""
    count = int(os.environ.get("GENERICDP_RESTARTS", "1000"))
    await _run_restarts(base, count, seed=int(os.environ.get("GENERICDP_SEED", "1")))


class DeletingKubelet:
    """A kubelet whose directory loses the plugin's socket just as a Register arrives.

    It then dials the named socket back as the real one does (retrying for up to
    10 s), asks for the options and opens ListAndWatch before it answers.
    """

    def __init__(self, plugin_dir: Path) -> None:
        self.plugin_dir = plugin_dir
        self.dialed: list[float] = []  # seconds each dial-back took
        self._channels: list[grpc.aio.Channel] = []

    async def Register(
        self, request: pb.RegisterRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.Empty:
        socket = self.plugin_dir / request.endpoint
        if not self.dialed:
            socket.unlink()  # deleted while this Register is in flight
        loop = asyncio.get_running_loop()
        started = loop.time()
        channel = grpc.aio.insecure_channel(f"unix:{socket}")
        self._channels.append(channel)
        try:
            await asyncio.wait_for(channel.channel_ready(), KUBELET_DIAL_TIMEOUT)
        except TimeoutError:
            await context.abort(grpc.StatusCode.UNKNOWN, "failed to dial device plugin")
        self.dialed.append(loop.time() - started)
        stub = Stub(channel, pb.DESCRIPTOR.services_by_name["DevicePlugin"])
        await stub.GetDevicePluginOptions(pb.Empty())
        await stub.ListAndWatch(pb.Empty()).read()
        return pb.Empty()

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close(None)


async def test_socket_deleted_during_register_is_served_again_at_its_path(base: Path) -> None:
    """Our socket deleted while a Register naming it is in flight: that path serves again."""
    settings = settings_for(base)
    settings.plugin_dir.mkdir()
    kubelet = DeletingKubelet(settings.plugin_dir)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [service_handler(pb.DESCRIPTOR.services_by_name["Registration"], kubelet)]
    )
    server.add_insecure_port(f"unix:{settings.plugin_dir / KUBELET_SOCKET_NAME}")
    await server.start()
    supervisor = Supervisor(
        settings, DevicePluginBackend(settings), discover=ScriptedDiscovery({A: [unit("u0")]})
    )
    try:
        await supervisor.start(_cfg([A]))
        statuses = await supervisor.wait_for(all_registered(), timeout=3)
        # Served again within the kubelet's first retry (about 1 s), not its 10 s.
        assert len(kubelet.dialed) == 1
        assert kubelet.dialed[0] < 2.0
        assert statuses[A].registrations == 1
        socket = statuses[A].socket
        assert socket is not None
        assert socket.is_socket()
    finally:
        assert await supervisor.stop() == ()
        await kubelet.close()
        await server.stop(None)


async def test_a_kubelet_socket_that_never_answers_costs_a_second_not_the_timeout(
    base: Path,
) -> None:
    """A kubelet.sock that accepts but never answers (a kubelet dying as we connect) is left
    within about a second for the kubelet that replaces it, not after the Register timeout."""
    settings = settings_for(base)
    plugin_dir = settings.plugin_dir
    plugin_dir.mkdir(parents=True)
    kubelet_sock = plugin_dir / KUBELET_SOCKET_NAME
    accepted = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered: no HTTP/2 handshake
        accepted.set()

    silent = await asyncio.start_unix_server(hold, path=str(kubelet_sock))
    supervisor = Supervisor(
        settings, DevicePluginBackend(settings), discover=ScriptedDiscovery({A: [unit("u0")]})
    )
    await supervisor.start(_cfg([A]))
    try:
        async with asyncio.timeout(5):
            await accepted.wait()
        silent.close()  # the listener goes; the connection it accepted stays open, silent
        kubelet_sock.unlink()
        loop = asyncio.get_running_loop()
        async with EmbeddedKubelet(plugin_dir) as kubelet:
            started = loop.time()
            await kubelet.wait_until(
                lambda k: A in k.resources and k.resources[A].connected, timeout=5
            )
            assert loop.time() - started < REGISTER_TIMEOUT / 5
            assert kubelet.problems() == []
    finally:
        await supervisor.stop()
        for writer in held:
            writer.close()


async def test_a_register_given_up_fails_its_dial_back_and_deregisters_by_name(
    base: Path,
) -> None:
    """As the real 1.36 kubelet: a plugin giving up on Register cancels the dial-back,
    which then fails like any other and removes the client filed under the name."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        stale = asyncio.create_task(
            register(
                kubelet.socket,
                endpoint="gone.sock",
                resource_name=SERIAL,
                options=PluginOptions(),
                timeout=1.0,  # well inside the kubelet's 10 s dial-back
            )
        )
        await kubelet.wait_until(lambda k: _count(k, EventKind.DIALING) == 1)
        plugin = FakePlugin(three_devices())
        async with registered(kubelet, plugin, endpoint="live.sock"):
            await kubelet.wait_until(lambda k: k.resources[SERIAL].allocatable == 2)
            with pytest.raises(RegistrationError, match="did not answer Register"):
                await stale
            await kubelet.wait_until(lambda k: _count(k, EventKind.DEREGISTERED) == 1, timeout=2)
            assert kubelet.problems()[0] == (
                f"{SERIAL}: dial-back of gone.sock failed; removed the client of live.sock "
                "registered meanwhile"
            )
