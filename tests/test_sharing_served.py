"""Unbounded sharing and unplug while in use, served to the embedded kubelet.

The kubelet's PodResources List (served by the embedded kubelet) is what tells
the daemon which IDs are held; the poll runs every 50 ms here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import pytest

from genericdp.config.model import Config
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.kubelet.embedded import EventKind
from genericdp.runtime.supervisor import Supervisor
from genericdp.settings import Settings
from tests.kubelet_fakes import EmbeddedKubelet
from tests.polling import eventually
from tests.runtime_harness import (
    Running,
    ScriptedDiscovery,
    config,
    device_plugin,
    settings_for,
    unit,
)

KVM = "example.com/kvm"
SERIAL = "example.com/serial"
FREE = 3


def _settings(base: Path, poll: float = 0.05) -> Settings:
    return settings_for(
        base, pod_resources_socket=base / "pr.sock", pod_resources_poll_interval=poll
    )


@asynccontextmanager
async def _daemon(
    settings: Settings,
    cfg: Config,
    discovery: ScriptedDiscovery,
    backend: DevicePluginBackend | None = None,
) -> AsyncIterator[Supervisor]:
    backend = backend or DevicePluginBackend(settings)
    supervisor = Supervisor(settings, backend, discover=discovery)
    await supervisor.start(cfg)
    try:
        yield supervisor
    finally:
        assert await supervisor.stop() == ()


@asynccontextmanager
async def _running(
    base: Path, cfg: Config, discovery: ScriptedDiscovery, poll: float = 0.05
) -> AsyncIterator[Running]:
    settings = _settings(base, poll)
    backend = device_plugin(settings)
    async with (
        EmbeddedKubelet(
            settings.plugin_dir, pod_resources_socket=settings.pod_resources_socket
        ) as kubelet,
        _daemon(settings, cfg, discovery, backend) as supervisor,
    ):
        yield Running(kubelet, supervisor, settings, backend)


def _kvm_config() -> Config:
    return config(
        f"resources:\n  - name: {KVM}\n    match: [{{glob: /dev/kvm}}]\n"
        f"    count: unbounded\n    freeIds: {FREE}\n"
    )


def _free(kubelet: EmbeddedKubelet) -> int:
    """Healthy IDs the kubelet could hand out now."""
    snap = kubelet.resources[KVM]
    return sum(1 for d in snap.devices.values() if d.healthy and d.id not in snap.allocated)


@asynccontextmanager
async def _watch_free(kubelet: EmbeddedKubelet) -> AsyncIterator[list[int]]:
    """Every free count the kubelet had, checked at each of its state changes."""
    seen: list[int] = []

    def record(k: EmbeddedKubelet) -> bool:
        if KVM in k.resources and k.resources[KVM].connected and k.resources[KVM].capacity:
            seen.append(_free(k))
        return False

    task = asyncio.create_task(kubelet.wait_until(record, timeout=3600))
    try:
        yield seen
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def test_fifty_consumers_in_a_row_never_run_out_and_never_see_many_free(base: Path) -> None:
    """50 pods one after another each get an ID and the kubelet never sees more than
    freeIds free ones; IDs of ended pods are reclaimed at the next poll and handed
    out again, lowest first."""
    discovery = ScriptedDiscovery({KVM: [unit("kvm")]})
    async with _running(base, _kvm_config(), discovery) as rt:
        await rt.registered([KVM])
        async with _watch_free(rt.kubelet) as seen:
            for n in range(50):
                await rt.until(lambda k: _free(k) == FREE)  # the previous pod's ID is replaced
                await rt.kubelet.allocate(KVM, 1, pod=f"vm-{n}")
            await rt.until(lambda k: _free(k) == FREE)
        assert seen, "the watch saw the kubelet's states"
        assert max(seen) <= FREE, f"more than {FREE} free IDs at some point: {max(seen)}"
        assert min(seen) >= FREE - 1, "each pod took one ID and a new one followed"
        snap = rt.kubelet.resources[KVM]
        assert snap.allocated == {f"kvm::{i}" for i in range(50)}
        assert snap.capacity == 50 + FREE, "the held IDs plus freeIds, nothing more"
        # Every third pod ends. Until the next PodResources poll the kubelet sees
        # their IDs free too (it frees them itself); then they are reclaimed.
        for n in range(0, 50, 3):
            rt.kubelet.release("default", f"vm-{n}")
        held = 50 - len(range(0, 50, 3))
        await rt.until(lambda k: k.resources[KVM].capacity == held + FREE)
        assert _free(rt.kubelet) == FREE
        # The next pods get the released IDs again, lowest first.
        async with _watch_free(rt.kubelet) as seen:
            for n in range(10):
                await rt.until(lambda k: _free(k) == FREE)
                before = rt.kubelet.resources[KVM].allocated
                await rt.kubelet.allocate(KVM, 1, pod=f"again-{n}")
                (new_id,) = rt.kubelet.resources[KVM].allocated - before
                assert new_id == f"kvm::{3 * n}", "the lowest free index"
            await rt.until(lambda k: _free(k) == FREE)
        assert max(seen) <= FREE
        assert rt.kubelet.problems() == []


async def test_a_restarted_daemon_lists_every_id_the_kubelet_holds_from_the_start(
    base: Path,
) -> None:
    """After a restart of the daemon, its very first list already holds the IDs
    pods hold (read from PodResources before Register), so the kubelet's
    checkpoint never meets a missing ID."""
    discovery = ScriptedDiscovery({KVM: [unit("kvm")]})
    settings = _settings(base)
    cfg = _kvm_config()
    async with EmbeddedKubelet(
        settings.plugin_dir, pod_resources_socket=settings.pod_resources_socket
    ) as kubelet:
        async with _daemon(settings, cfg, discovery):
            await kubelet.wait_until(lambda k: KVM in k.resources and k.resources[KVM].connected)
            for n in range(8):
                await kubelet.wait_until(lambda k: _free(k) == FREE)
                await kubelet.allocate(KVM, 1, pod=f"vm-{n}")
        registered = sum(1 for e in kubelet.events if e.kind is EventKind.REGISTERED)
        async with _daemon(settings, cfg, discovery):
            await kubelet.wait_until(
                lambda k: (
                    sum(1 for e in k.events if e.kind is EventKind.REGISTERED) > registered
                    and k.resources[KVM].connected
                    and _free(k) == FREE
                )
            )
            events = list(kubelet.events)
            last = max(i for i, e in enumerate(events) if e.kind is EventKind.REGISTERED)
            lists = [e.detail for e in events[last:] if e.kind is EventKind.DEVICES]
            sizes = [int(d.split(" ", 1)[0]) for d in lists]  # "<n> devices, <m> healthy"
            assert sizes, "the new daemon sent its list"
            assert min(sizes) == 8 + FREE, lists
            assert kubelet.resources[KVM].allocated <= set(kubelet.resources[KVM].devices)


def _serial_config() -> Config:
    return config(f"resources:\n  - name: {SERIAL}\n    match: [{{glob: /dev/ttyUSB*}}]\n")


async def _health(rt: Running, device_id: str) -> str | None:
    device = rt.kubelet.resources[SERIAL].devices.get(device_id)
    return None if device is None else device.health


async def test_unplugged_while_in_use_stays_unhealthy_until_released(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A unit unplugged under a pod stays listed Unhealthy (the pod's status says so)
    until the kubelet releases it; then it leaves the list."""
    caplog.set_level(logging.INFO, logger="genericdp")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")]})
    async with _running(base, _serial_config(), discovery) as rt:
        await rt.registered([SERIAL])
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 2)
        await rt.kubelet.allocate(SERIAL, 1, pod="reader")
        (held,) = rt.kubelet.resources[SERIAL].allocated
        status = rt.kubelet.allocated_resources_status("default", "reader")
        assert status == {SERIAL: {held: "Healthy"}}
        await eventually(lambda: rt.usage.listed(SERIAL) == {held}, "List shows it")
        other = "ttyUSB1" if held == "ttyUSB0" else "ttyUSB0"
        discovery.units[SERIAL] = [unit(other)]
        rt.supervisor.rescan("unplugged")
        await rt.until(lambda k: k.resources[SERIAL].devices[held].health == "Unhealthy")
        snap = rt.kubelet.resources[SERIAL]
        assert (snap.capacity, snap.allocatable) == (2, 1)
        assert rt.kubelet.allocated_resources_status("default", "reader") == {
            SERIAL: {held: "Unhealthy"}
        }
        assert f"unit {held} vanished while a container holds it" in caplog.text
        rt.kubelet.release("default", "reader")
        await rt.until(lambda k: held not in k.resources[SERIAL].devices)
        snap = rt.kubelet.resources[SERIAL]
        assert (snap.capacity, snap.allocatable) == (1, 1)
        assert f"unit {held} vanished while in use and is released now" in caplog.text
        # Plugged in again later: a new unit like any other, Healthy.
        discovery.units[SERIAL] = [unit("ttyUSB0"), unit("ttyUSB1")]
        rt.supervisor.rescan("replugged")
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 2)


async def test_replugged_while_in_use_is_healthy_again_under_the_same_id(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A held unit that comes back with its stable ID is Healthy again: the same
    single entry, the pod's status Healthy again."""
    caplog.set_level(logging.INFO, logger="genericdp")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _running(base, _serial_config(), discovery) as rt:
        await rt.registered([SERIAL])
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        await rt.kubelet.allocate(SERIAL, 1, pod="reader")
        await eventually(lambda: rt.usage.listed(SERIAL) == {"ttyUSB0"})
        discovery.units[SERIAL] = []
        rt.supervisor.rescan("unplugged")
        await rt.until(lambda k: k.resources[SERIAL].devices["ttyUSB0"].health == "Unhealthy")
        discovery.units[SERIAL] = [unit("ttyUSB0")]
        rt.supervisor.rescan("replugged")
        await rt.until(lambda k: k.resources[SERIAL].devices["ttyUSB0"].health == "Healthy")
        snap = rt.kubelet.resources[SERIAL]
        assert list(snap.devices) == ["ttyUSB0"]
        assert (snap.capacity, snap.allocatable) == (1, 1)
        assert rt.kubelet.allocated_resources_status("default", "reader") == {
            SERIAL: {"ttyUSB0": "Healthy"}
        }
        assert "unit ttyUSB0 is back with the same ID" in caplog.text
        rt.kubelet.release("default", "reader")
        await eventually(lambda: rt.usage.listed(SERIAL) == frozenset())
        assert rt.supervisor.status()[SERIAL].devices == 1, "released and present: still listed"


async def test_unplugged_before_any_poll_saw_the_pod_still_counts_as_held(
    base: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What our Allocate handed out is held until a List says otherwise: a unit
    unplugged right after it was given out stays listed Unhealthy, and says so."""
    caplog.set_level(logging.INFO, logger="genericdp")
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with _running(base, _serial_config(), discovery, poll=3600) as rt:
        await rt.registered([SERIAL])
        await rt.until(lambda k: k.resources[SERIAL].allocatable == 1)
        await rt.kubelet.allocate(SERIAL, 1, pod="reader")
        discovery.units[SERIAL] = []
        rt.supervisor.rescan("unplugged")
        await rt.until(lambda k: k.resources[SERIAL].devices["ttyUSB0"].health == "Unhealthy")
        assert "unit ttyUSB0 vanished while a container holds it" in caplog.text
