"""Hotplug end to end: a fake host, the real discovery, the supervisor and an embedded kubelet.

``rescan_interval`` is an hour here, so only the inotify watch can explain a
change the kubelet sees within the test's deadline.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from genericdp.config.model import ResourceDefinition
from genericdp.discovery import discover
from genericdp.discovery.model import Roots, Unit
from genericdp.kubelet.embedded.state import EventKind
from tests.fakesys import FakeHost
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import NO_PERIODIC, config, running

SERIAL = "example.com/serial"
BY_ID = "example.com/by-id"
RENDER = "example.com/render"


@dataclass
class CountingDiscovery:
    """The real discovery, counting its runs (it runs in worker threads)."""

    calls: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _loop: asyncio.AbstractEventLoop | None = None
    _called: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, definition: ResourceDefinition, roots: Roots) -> tuple[Unit, ...]:
        with self._lock:
            self.calls += 1
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake)
        return discover(definition, roots)

    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def wait_calls(self, count: int, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until discovery has run ``count`` times in all."""
        async with asyncio.timeout(timeout):
            while self.calls < count:
                called = self._called
                await called.wait()

    async def no_calls_beyond(self, count: int, window: float) -> None:
        """Fail if discovery runs more than ``count`` times within ``window`` seconds.

        Showing that something does not happen needs a bounded wait; the
        window is many times the settle delay in which it would happen.
        """
        with pytest.raises(TimeoutError):
            await self.wait_calls(count + 1, timeout=window)

    def _wake(self) -> None:
        old, self._called = self._called, asyncio.Event()
        old.set()


def capacity(name: str, value: int) -> Callable[[EmbeddedKubelet], bool]:
    def check(k: EmbeddedKubelet) -> bool:
        return name in k.resources and k.resources[name].capacity == value

    return check


def _device_updates(kubelet: EmbeddedKubelet, name: str) -> int:
    return sum(1 for e in kubelet.events if e.kind is EventKind.DEVICES and e.resource == name)


SERIAL_CONFIG = f"resources:\n- name: {SERIAL}\n  match: [glob: /dev/ttyUSB*]\n"


async def test_plug_and_unplug_change_capacity_within_a_second(base: Path) -> None:
    """A dongle plugged in raises capacity, unplugged lowers it, each well under a second."""
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="OLD", ttys=("ttyUSB0",))
    counting = CountingDiscovery()
    async with running(base, config(SERIAL_CONFIG), discover=counting, **NO_PERIODIC) as rt:
        await rt.until(capacity(SERIAL, 1))
        loop = asyncio.get_running_loop()
        started = loop.time()
        host.add_usb_serial(port="1-2", serial="NEW", ttys=("ttyUSB1",))
        await rt.until(capacity(SERIAL, 2), timeout=5)
        plugged = loop.time() - started
        started = loop.time()
        host.remove("/dev/ttyUSB0")
        await rt.until(capacity(SERIAL, 1), timeout=5)
        unplugged = loop.time() - started
        assert plugged < 1.0, f"plug seen after {plugged:.3f}s"
        assert unplugged < 1.0, f"unplug seen after {unplugged:.3f}s"


async def test_by_id_link_appearing_in_a_new_directory(base: Path) -> None:
    """/dev/serial/by-id does not exist at start; the first dongle's link is still seen."""
    host = FakeHost(base / "host")
    cfg = config(f"resources:\n- name: {BY_ID}\n  match: [glob: /dev/serial/by-id/*]\n")
    async with running(base, cfg, discover=CountingDiscovery(), **NO_PERIODIC) as rt:
        await rt.registered([BY_ID])
        assert rt.kubelet.resources[BY_ID].capacity == 0
        host.add_usb_serial(serial="FIRST", ttys=("ttyUSB0",))
        await rt.until(capacity(BY_ID, 1), timeout=5)
        host.add_usb_serial(port="1-3", serial="SECOND", ttys=("ttyUSB1",))
        await rt.until(capacity(BY_ID, 2), timeout=5)


async def test_node_in_a_subdirectory_created_after_start(base: Path) -> None:
    """/dev/dri/renderD129 appears in a /dev/dri made after the daemon started."""
    host = FakeHost(base / "host")
    cfg = config(f"resources:\n- name: {RENDER}\n  match: [glob: /dev/dri/renderD*]\n")
    async with running(base, cfg, discover=CountingDiscovery(), **NO_PERIODIC) as rt:
        await rt.registered([RENDER])
        host.add_drm_card(pci="0000:04:00.0", card=1, render=129)
        await rt.until(capacity(RENDER, 1), timeout=5)
        assert set(rt.kubelet.resources[RENDER].devices) == {"pci-0000:04:00.0"}


async def test_shm_activity_does_not_rescan(base: Path) -> None:
    """Files coming and going in /dev/shm never run discovery; a real plug still does."""
    host = FakeHost(base / "host")
    shm = host.dev / "shm"
    shm.mkdir()
    counting = CountingDiscovery()
    async with running(base, config(SERIAL_CONFIG), discover=counting, **NO_PERIODIC) as rt:
        counting.bind()
        await rt.registered([SERIAL])
        baseline = counting.calls
        for i in range(100):
            (shm / f"sem.{i}").write_text("x")
            (shm / f"sem.{i}").unlink()
        await counting.no_calls_beyond(baseline, window=1.0)
        host.add_usb_serial(ttys=("ttyUSB0",))
        await rt.until(capacity(SERIAL, 1), timeout=5)


async def test_udev_storm_is_a_bounded_number_of_scans(base: Path) -> None:
    """Four ttys with their links and usb node: at most 3 scans and one kubelet update."""
    host = FakeHost(base / "host")
    counting = CountingDiscovery()
    async with running(base, config(SERIAL_CONFIG), discover=counting, **NO_PERIODIC) as rt:
        counting.bind()
        await rt.until(lambda k: _device_updates(k, SERIAL) == 1)  # the first, empty list
        baseline = counting.calls
        host.add_usb_serial(ttys=("ttyUSB0", "ttyUSB1", "ttyUSB2", "ttyUSB3"))
        await rt.until(capacity(SERIAL, 4), timeout=5)
        await counting.wait_calls(baseline + 2)  # the batch, then the late-udev follow-up
        await counting.no_calls_beyond(baseline + 3, window=1.5)
        assert _device_updates(rt.kubelet, SERIAL) == 2


async def test_watch_recovers_when_the_device_root_appears_late(base: Path) -> None:
    """A device root missing at start is watched once it exists; plugs are then seen."""
    host = FakeHost(base / "host")
    away = base / "host" / "dev-away"
    host.dev.rename(away)
    counting = CountingDiscovery()
    async with running(base, config(SERIAL_CONFIG), discover=counting, **NO_PERIODIC) as rt:
        assert not rt.kubelet.resources  # no scan has succeeded: nothing registered
        away.rename(host.dev)
        await rt.registered([SERIAL], timeout=15)
        host.add_usb_serial(port="1-1", serial="ONE", ttys=("ttyUSB0",))
        await rt.until(capacity(SERIAL, 1), timeout=15)
        host.add_usb_serial(port="1-2", serial="TWO", ttys=("ttyUSB1",))
        await rt.until(capacity(SERIAL, 2), timeout=5)


async def test_watch_recovers_when_the_device_root_is_replaced(base: Path) -> None:
    """The device root moved away and back: the watch starts again and sees later plugs."""
    host = FakeHost(base / "host")
    host.add_usb_serial(port="1-1", serial="ONE", ttys=("ttyUSB0",))
    away = base / "host" / "dev-away"
    async with running(
        base, config(SERIAL_CONFIG), discover=CountingDiscovery(), **NO_PERIODIC
    ) as rt:
        await rt.until(capacity(SERIAL, 1))
        host.dev.rename(away)
        away.rename(host.dev)
        host.add_usb_serial(port="1-2", serial="TWO", ttys=("ttyUSB1",))
        await rt.until(capacity(SERIAL, 2), timeout=15)
        host.add_usb_serial(port="1-3", serial="THREE", ttys=("ttyUSB2",))
        await rt.until(capacity(SERIAL, 3), timeout=15)
