"""The DRA driver against the embedded DRA kubelet: registration, prepare and
unprepare over gRPC, retries, health streams, lost sockets, restarts."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from genericdp.config.model import HealthCheck, Hooks
from genericdp.dra.driver import DraDriver
from genericdp.dra.embedded import DraKubeletError, resolve_cdi
from genericdp.hooks import HookRunner, run_hook
from genericdp.kubeletplugin.claims import ClaimRef
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.service import HEARTBEAT, SERVICES
from genericdp.metrics import Metrics
from genericdp.runtime.recorder import CLAIM_RESULTS, NO_METRICS, Recorder
from tests.dra_drivers import new_driver, started
from tests.dra_fakes import (
    DRIVER,
    HOOK,
    NODE,
    SERIAL,
    MemoryClaims,
    RecordedHooks,
    allocated,
    claim,
    definition,
    unit,
)
from tests.dra_kubelet import HEALTH_TIMEOUT, DraEventKind, EmbeddedDraKubelet
from tests.polling import eventually

REGISTERED, REFUSED, DEREGISTERED = (
    DraEventKind.REGISTERED,
    DraEventKind.REFUSED,
    DraEventKind.DEREGISTERED,
)
PREPARE, HEALTH_STREAM = DraEventKind.PREPARE, DraEventKind.HEALTH_STREAM

ALL_HOOKS = Hooks(init=HOOK, pre_start=HOOK, cleanup=HOOK)


def driver(
    base: Path,
    claims: MemoryClaims,
    hooks: HookRunner | None = None,
    recorder: Recorder = NO_METRICS,
    heartbeat: float = HEARTBEAT,
) -> AbstractAsyncContextManager[DraDriver]:
    """The driver of A0 and A1 with every hook, started; closed after."""
    resource = definition(hooks=ALL_HOOKS)
    made = new_driver(
        base, claims, resource=resource, run_hook=hooks, recorder=recorder, heartbeat=heartbeat
    )
    return started(made)


async def test_registration_handshake_and_a_pod_gets_its_devices(base: Path) -> None:
    claims = MemoryClaims()
    claims.allocate(claim(), allocated(SERIAL, unit(1)))
    hooks = RecordedHooks()
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        driver(base, claims, hooks) as d,
    ):
        await kubelet.wait_until(lambda k: k.count(REGISTERED, DRIVER) == 1)
        assert d.registration.service.registered, "told it is registered"
        assert kubelet.chosen_service(DRIVER) == "v1.DRAPlugin"
        assert d.registration.socket == base / "registry" / f"{DRIVER}-reg.sock"
        assert d.dra_socket == base / "plugins" / DRIVER / "dra.sock"
        ids = await kubelet.prepare_pod(DRIVER, [claim()])
        assert ids == [
            f"{DRIVER}/claim={claim().uid}-{device_name(SERIAL, 'A1')}",
            f"{DRIVER}/claim={claim().uid}_req",  # its request's device metadata
        ]
        edits = resolve_cdi(base / "cdi", ids)
        assert edits["deviceNodes"] == [
            {"path": "/dev/serial/by-id/usb-A1", "hostPath": "/dev/ttyUSB1", "permissions": "rw"}
        ]
        await kubelet.unprepare(DRIVER, [claim()])
        assert hooks.names() == ["init", "preStart", "cleanup"]
        assert list((base / "cdi").iterdir()) == []


async def test_prepare_and_unprepare_are_counted_by_result_and_timed_per_claim(
    base: Path,
) -> None:
    """Each claim of a call is one count (its outcome) and one duration, in /metrics."""
    claims = MemoryClaims()
    claims.allocate(claim(1), allocated(SERIAL, unit(0)))
    claims.allocate(claim(2), allocated(SERIAL, unit(7)))  # no such device on this node
    claims.allocate(claim(3), allocated(SERIAL, unit(1)))
    hooks, metrics = RecordedHooks(), Metrics(process=False)

    def prepares(result: str) -> float | None:
        labels = {"driver": DRIVER, "result": result}
        return metrics.registry.get_sample_value("genericdp_dra_prepares_total", labels)

    def seconds(operation: str) -> float | None:
        name = f"genericdp_dra_{operation}_duration_seconds_count"
        return metrics.registry.get_sample_value(name, {"driver": DRIVER})

    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        driver(base, claims, hooks, recorder=metrics),
    ):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        assert prepares("ok") is None  # nothing before the first claim
        await kubelet.prepare_pod(DRIVER, [claim(1)])
        with pytest.raises(DraKubeletError, match="is not on this node"):
            await kubelet.prepare(DRIVER, [claim(2)])
        hooks.fail.add("init")
        with pytest.raises(DraKubeletError, match="init hook failed"):
            await kubelet.prepare(DRIVER, [claim(3)])
        await kubelet.unprepare(DRIVER, [claim(1)])
    counted = {result: prepares(result) for result in CLAIM_RESULTS}
    assert counted == dict.fromkeys(CLAIM_RESULTS, 0.0) | {
        "ok": 1.0,
        "claim_failed": 1.0,
        "hook_failed": 1.0,
    }
    labels = {"driver": DRIVER, "result": "ok"}
    assert metrics.registry.get_sample_value("genericdp_dra_unprepares_total", labels) == 1.0
    assert seconds("prepare") == 3.0
    assert seconds("unprepare") == 1.0
    assert b"genericdp_dra_prepare_duration_seconds_bucket" in metrics.exposition()


OUT_OF_DESCRIPTORS = """
import asyncio, contextlib, os, resource, sys
from pathlib import Path
from genericdp.dra.embedded import DraKubeletError, EmbeddedDraKubelet

async def main() -> None:
    kubelet = EmbeddedDraKubelet(Path(sys.argv[1]))
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 8, hard))
    held = []
    with contextlib.suppress(OSError):  # every descriptor taken
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    try:
        async with asyncio.timeout(10):
            await kubelet.start()
    except DraKubeletError as exc:
        print(exc)

asyncio.run(main())
"""


def test_a_kubelet_that_cannot_watch_its_registry_says_so(base: Path) -> None:
    """Out of file descriptors, ``start`` raises saying what it cannot watch and why
    (``simulate --backend dra`` prints it) instead of waiting forever. In a process
    of its own: nothing else there may want a descriptor meanwhile."""
    done = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, str(base / "registry")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"cannot watch {base / 'registry'}: "), done.stdout


async def test_a_kubelet_with_only_v1beta1_uses_it(base: Path) -> None:
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(0))})
    async with (
        EmbeddedDraKubelet(base / "registry", services=["v1beta1.DRAPlugin"]) as kubelet,
        driver(base, claims),
    ):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        assert kubelet.chosen_service(DRIVER) == "v1beta1.DRAPlugin"
        assert len(await kubelet.prepare_pod(DRIVER, [claim()])) == 2  # device, metadata


async def test_a_kubelet_that_knows_none_of_our_services_refuses_and_says_why(
    base: Path,
) -> None:
    async with (
        EmbeddedDraKubelet(base / "registry", services=["v2.DRAPlugin"]) as kubelet,
        driver(base, MemoryClaims()) as d,
    ):
        await kubelet.wait_until(lambda k: k.count(REFUSED, DRIVER) == 1)
        assert not kubelet.registered(DRIVER)
        message = d.registration.service.last_error or ""
        assert "none of services supported by the plugin" in message
        for service in SERVICES:
            assert service in message
        # The kubelet tries again while the socket stays (0.5 s later, then 1 s, ...).
        await kubelet.wait_until(lambda k: k.count(REFUSED, DRIVER) >= 2)


async def test_prepare_is_retried_until_the_claim_can_be_prepared(base: Path) -> None:
    claims = MemoryClaims()  # not allocated yet: the first syncs fail
    hooks = RecordedHooks()
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims, hooks):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        with pytest.raises(DraKubeletError, match=r"claim-1 .* not found"):
            await kubelet.prepare(DRIVER, [claim()])
        claims.allocate(claim(), allocated(SERIAL, unit(0)))
        assert len(await kubelet.prepare_pod(DRIVER, [claim()])) == 2  # device, metadata
        calls = kubelet.count(PREPARE)
        # The kubelet does not ask again for a prepared claim; a new kubelet
        # (restarted, its checkpoint lost) does, and gets the same answer.
        await kubelet.prepare_pod(DRIVER, [claim()])
        assert kubelet.count(PREPARE) == calls
    async with EmbeddedDraKubelet(base / "registry2") as other:
        resource = definition(hooks=ALL_HOOKS)
        d2 = new_driver(
            base, claims, resource=resource, units=[unit(0)], run_hook=hooks, registry="registry2"
        )
        await d2.start()
        try:
            await other.wait_until(lambda k: k.registered(DRIVER))
            runs = len(hooks.runs)
            assert len(await other.prepare_pod(DRIVER, [claim()])) == 2
            assert len(hooks.runs) == runs  # from the checkpoint: no hook again
            await other.unprepare(DRIVER, [claim()])
            assert hooks.names()[-1] == "cleanup"
        finally:
            await d2.close()


async def test_health_streams_each_device_with_the_probe_message(base: Path) -> None:
    """Every device with its probe's message; heartbeats keep them fresh on the kubelet's
    clock (30 s without a report reads Unknown), on the stream first opened."""
    claims = MemoryClaims()
    now = [1000.0]
    async with (
        EmbeddedDraKubelet(base / "registry", clock=lambda: now[0]) as kubelet,
        driver(base, claims, heartbeat=0.2) as d,
    ):
        d.inventory.set_resource(definition(health=HealthCheck(HOOK)), [unit(0), unit(1)])
        await kubelet.wait_until(lambda k: len(k.device_health(DRIVER)) == 2)
        a0, a1 = (NODE, device_name(SERIAL, "A0")), (NODE, device_name(SERIAL, "A1"))
        assert kubelet.device_health(DRIVER)[a0] == ("Unknown", "not probed yet")
        d.inventory.set_health(SERIAL, {"A1"}, {"A0", "A1"}, {"A1": "exit 3: no carrier"})
        verdicts = {a0: ("Healthy", ""), a1: ("Unhealthy", "exit 3: no carrier")}
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == verdicts)
        assert d.server is not None
        assert d.server.health.streams == 1
        streams = kubelet.count(HEALTH_STREAM)
        now[0] += HEALTH_TIMEOUT + 1
        assert kubelet.device_health(DRIVER)[a0] == ("Unknown", ""), "no report for 30 s"
        await kubelet.wait_until(lambda k: k.device_health(DRIVER) == verdicts)  # a heartbeat
        assert kubelet.count(HEALTH_STREAM) == streams


async def test_several_claims_naming_one_device_are_each_prepared_and_each_see_its_health(
    base: Path,
) -> None:
    """Multiple allocations (KEP-5075): two claims, one shared device; each claim its
    own CDI devices, both pods' status follows the device, cleanup once at the last."""
    claims = MemoryClaims()
    shared = [claim(1), claim(2)]
    for ref in shared:
        claims.allocate(ref, allocated(SERIAL, unit(0)))
    hooks = RecordedHooks()
    async with (
        EmbeddedDraKubelet(base / "registry") as kubelet,
        driver(base, claims, hooks, heartbeat=0.2) as d,
    ):
        d.inventory.set_resource(definition(hooks=ALL_HOOKS, health=HealthCheck(HOOK)), [unit(0)])
        d.inventory.set_health(SERIAL, set(), {"A0"}, {})
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        ids = await kubelet.prepare_pod(DRIVER, shared)
        assert len(set(ids)) == 4, "one CDI device and one metadata mount per claim"
        a0 = device_name(SERIAL, "A0")
        assert kubelet.claims_of(NODE, a0) == tuple(sorted(c.uid for c in shared))
        d.inventory.set_health(SERIAL, {"A0"}, {"A0"}, {"A0": "exited 1: gone quiet"})
        bad = {a0: ("Unhealthy", "exited 1: gone quiet")}
        await kubelet.wait_until(
            lambda k: all(k.claim_health(DRIVER, c.uid) == bad for c in shared)
        )
        await kubelet.unprepare(DRIVER, shared[:1])
        assert kubelet.claims_of(NODE, a0) == (shared[1].uid,)
        assert "cleanup" not in hooks.names()
        await kubelet.unprepare(DRIVER, shared[1:])
        assert hooks.names().count("cleanup") == 1
        assert kubelet.claims_of(NODE, a0) == ()


async def prepare_and_unprepare(kubelet: EmbeddedDraKubelet) -> int:
    """A pod's claim prepared and released after the DRA socket was lost; its CDI IDs.

    The kubelet's channel, which failed while the socket was gone, reconnects
    after gRPC's backoff (1 s, then 1.6 s...); the pod worker keeps retrying
    meanwhile (here for up to about 6 s).
    """
    ids = await kubelet.prepare_pod(DRIVER, [claim()], attempts=8)
    await kubelet.unprepare(DRIVER, [claim()])
    return len(ids)


async def test_removed_sockets_are_served_again_and_the_kubelet_registers_again(
    base: Path,
) -> None:
    """Deleted or replaced by a file, each socket is served again (seen by inotify)."""
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(0))})
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims) as d:
        # Registered means NotifyRegistrationStatus answered too: the plugin is listed
        # before that call, and a socket removed during it fails the first registration.
        await kubelet.wait_until(lambda k: k.count(REGISTERED, DRIVER) == 1)
        d.registration.socket.unlink()
        await kubelet.wait_until(lambda k: k.count(DEREGISTERED, DRIVER) == 1)
        await kubelet.wait_until(lambda k: k.count(REGISTERED, DRIVER) == 2)
        d.dra_socket.unlink()
        await eventually(d.dra_socket.is_socket, "DRA socket back")
        assert await prepare_and_unprepare(kubelet) == 2
        d.dra_socket.unlink()
        d.dra_socket.write_text("not a socket")
        await eventually(d.dra_socket.is_socket, "DRA socket back in place of a file")
        assert await prepare_and_unprepare(kubelet) == 2


async def test_a_removed_plugin_directory_is_made_and_served_again(base: Path) -> None:
    """The DRA socket's directory removed (its watch lost): made again, the socket served."""
    claims = MemoryClaims({claim(): allocated(SERIAL, unit(0))})
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims) as d:
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        await asyncio.to_thread(shutil.rmtree, d.dra_socket.parent)
        await eventually(d.dra_socket.is_socket, "DRA socket back in a new directory")
        assert await prepare_and_unprepare(kubelet) == 2


@pytest.mark.parametrize("real_hooks", [False, True], ids=["recorded-hooks", "true-hooks"])
async def test_prepare_latency_through_the_kubelet(base: Path, real_hooks: bool) -> None:
    """Measured for docs/contributing/performance.md: one claim of one device; the init
    and preStart hooks recorded (no process) or run (/bin/true, twice)."""
    claims = MemoryClaims()
    hooks = run_hook if real_hooks else RecordedHooks()
    async with EmbeddedDraKubelet(base / "registry") as kubelet, driver(base, claims, hooks):
        await kubelet.wait_until(lambda k: k.registered(DRIVER))
        times = []
        for n in range(20):
            ref = ClaimRef("ns", f"c{n}", f"uid-{n:04d}")
            claims.allocate(ref, allocated(SERIAL, unit(n % 2)))
            started = time.perf_counter()
            await kubelet.prepare(DRIVER, [ref])
            times.append(time.perf_counter() - started)
            await kubelet.unprepare(DRIVER, [ref])
        times.sort()
        print(f"\nprepare: median {times[10] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms")
        assert times[10] < 2.0


async def test_a_wait_that_times_out_says_what_the_kubelet_saw(base: Path) -> None:
    """``wait_until`` fails with the kubelet's state and its last events, in words."""
    now = [42.0]
    async with EmbeddedDraKubelet(base / "registry", clock=lambda: now[0]) as kubelet:
        with pytest.raises(TimeoutError, match="plugins: none") as failed:
            await kubelet.wait_until(lambda k: k.registered(DRIVER), timeout=0.05)
    assert f"42.000 started -: watching {base / 'registry'}" in str(failed.value)
    assert [e.kind for e in kubelet.events] == [DraEventKind.STARTED, DraEventKind.STOPPED]
