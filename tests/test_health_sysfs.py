"""The sysfs health probe: an attribute read in-process, compared with a glob,
with the exec probe's threshold and recovery, bounded reads, and no process."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from genericdp.config.model import HealthCheck, SysfsProbe
from genericdp.discovery import discover
from genericdp.discovery.attributes import MAX_VALUE_BYTES, probe_unit
from genericdp.discovery.model import Unit
from genericdp.health import HealthMonitor
from tests.fakesys import FakeHost
from tests.runtime_harness import config

_SPAWNS = ("subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec", "os.system", "os.forkpty")
_spawned: list[str] | None = None


def _audit(event: str, _args: object) -> None:
    if _spawned is not None and event in _SPAWNS:
        _spawned.append(event)


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one only records when asked


@contextmanager
def no_process_started() -> Iterator[None]:
    """Fail if anything in this process forks, execs or spawns inside the block."""
    global _spawned  # noqa: PLW0603 - the audit hook's switch
    _spawned = []
    try:
        yield
        assert _spawned == [], f"processes were started: {_spawned}"
    finally:
        _spawned = None


def usb_units(host: FakeHost) -> tuple[Unit, ...]:
    (definition,) = config(
        "resources:\n- name: example.com/s\n  match: [glob: /dev/ttyUSB*]\n  groupBy: parent:usb\n"
    ).resources
    return discover(definition, host.roots)


def usb_dir(host: FakeHost, unit: Unit) -> Path:
    assert unit.parent is not None
    return host.sys / unit.parent


def test_attribute_of_the_units_device_compared_with_a_glob(base: Path) -> None:
    """USB ``authorized`` of the dongle: "1" passes, "0" fails with what was read."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0",))
    (unit,) = usb_units(host)
    probe = SysfsProbe("authorized", "1")
    assert probe_unit(unit, probe, host.roots).ok
    (usb_dir(host, unit) / "authorized").write_text("0\n")
    reading = probe_unit(unit, probe, host.roots)
    assert not reading.ok
    assert "authorized is '0', not '1'" in reading.detail


def test_ancestor_walk_and_subsystem(base: Path) -> None:
    """From a node's own device upwards the first device with the attribute is read;
    ``subsystem`` picks the nearest ancestor of that subsystem instead."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    (definition,) = config(
        "resources:\n- name: example.com/r\n  match: [glob: /dev/dri/renderD*]\n"
    ).resources
    (unit,) = discover(definition, host.roots)
    pci = host.sys / "bus" / "pci" / "devices" / "0000:03:00.0"
    (pci.resolve() / "power_state").write_text("D0\n")
    assert probe_unit(unit, SysfsProbe("power_state", "D0"), host.roots).ok
    assert probe_unit(unit, SysfsProbe("power_state", "D[03]*", subsystem="pci"), host.roots).ok
    missing = probe_unit(unit, SysfsProbe("power_state", "D0", subsystem="usb"), host.roots)
    assert not missing.ok
    assert "not found" in missing.detail


def test_globbed_components_must_all_pass(base: Path) -> None:
    """``ports/*/state``: every port read; one down fails the unit."""
    host = FakeHost(base / "host")
    host.add_drm_card("0000:03:00.0", card=0, render=128)
    (definition,) = config(
        "resources:\n- name: example.com/r\n  match: [glob: /dev/dri/renderD*]\n"
    ).resources
    (unit,) = discover(definition, host.roots)
    pci = (host.sys / "bus" / "pci" / "devices" / "0000:03:00.0").resolve()
    for port, state in (("1", "4: ACTIVE"), ("2", "4: ACTIVE")):
        (pci / "ports" / port).mkdir(parents=True)
        (pci / "ports" / port / "state").write_text(state + "\n")
    probe = SysfsProbe("ports/*/state", "4: ACTIVE")
    assert probe_unit(unit, probe, host.roots).ok
    (pci / "ports" / "2" / "state").write_text("1: DOWN\n")
    assert "ports/2/state is '1: DOWN'" in probe_unit(unit, probe, host.roots).detail


def test_reads_are_bounded(base: Path) -> None:
    """Links are not followed below the device, FIFOs and huge files are not read,
    and nothing resolving into the dev root is opened."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0",))
    (unit,) = usb_units(host)
    usb = usb_dir(host, unit)
    secret = base / "secret"
    secret.write_text("1\n")
    (usb / "leak").symlink_to(secret)
    (usb / "node").symlink_to(host.node("/dev/ttyUSB0"))
    os.mkfifo(usb / "fifo")
    (usb / "huge").write_text("1" * (MAX_VALUE_BYTES + 1))
    (usb / "sub").symlink_to(base)  # a directory link: not walked into
    for attribute in ("leak", "node", "sub/secret"):
        reading = probe_unit(unit, SysfsProbe(attribute, "*"), host.roots)
        assert not reading.ok
        assert "not found" in reading.detail
    # A FIFO is not a regular file: never opened (opening one blocks a reader).
    assert "not found" in probe_unit(unit, SysfsProbe("fifo", "*"), host.roots).detail
    huge = probe_unit(unit, SysfsProbe("huge", "*"), host.roots)
    assert f"is over {MAX_VALUE_BYTES} bytes" in huge.detail


def test_a_dev_root_inside_the_sys_root_is_never_read(base: Path) -> None:
    """Whatever resolves into the dev root is refused, even below the sys root."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0",))
    (unit,) = usb_units(host)
    roots = host.roots
    odd = type(roots)(dev=usb_dir(host, unit), sys=roots.sys, udev=roots.udev)
    reading = probe_unit(unit, SysfsProbe("authorized", "1"), odd)
    assert not reading.ok
    assert "outside the sys root" in reading.detail


async def test_three_hundred_units_threshold_and_recovery_without_a_process(base: Path) -> None:
    """300 loop devices probed by reading ``ro``: no process started; a unit turns
    Unhealthy after failureThreshold bad reads and Healthy after one good one."""
    host = FakeHost(base / "host")
    for n in range(300):
        host.add_loop(n)
    (definition,) = config(
        "resources:\n- name: example.com/loop\n  match: [glob: '/dev/loop*']\n"
    ).resources
    units = discover(definition, host.roots)
    assert len(units) == 300
    check = HealthCheck(exec=None, failure_threshold=2, sysfs=SysfsProbe("ro", "0"))
    reported: list[frozenset[str]] = []
    monitor = HealthMonitor(
        "example.com/loop", check, lambda: units, reported.append, roots=host.roots
    )
    ro = host.sys / "devices" / "virtual" / "block" / "loop7" / "ro"
    victim = next(u.id for u in units if u.nodes[0].host_path == "/dev/loop7")
    with no_process_started():
        assert await monitor.probe_once() == frozenset()
        ro.write_text("1\n")
        assert await monitor.probe_once() == frozenset()  # 1 of 2 failures
        assert await monitor.probe_once() == {victim}
        ro.write_text("0\n")
        assert await monitor.probe_once() == frozenset()
    assert reported == [frozenset(), {victim}, frozenset()]


async def test_a_read_that_blocks_times_out_and_does_not_pile_up(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stuck read fails its units at the timeout; the next round fails at once
    instead of starting a second thread, and reads resume once it returns.

    A regular file cannot block a read, so the stuck driver is a reader that waits."""
    host = FakeHost(base / "host")
    host.add_usb_serial("1-2", serial="A", ttys=("ttyUSB0",))
    units = usb_units(host)
    release = threading.Event()
    calls = 0

    def stuck(unit: Unit, probe: SysfsProbe, roots: object) -> object:  # noqa: ARG001 -- the probe runner's signature
        nonlocal calls
        calls += 1
        release.wait(10)
        return probe_unit(unit, probe, host.roots)

    probe = SysfsProbe("authorized", "1", timeout=0.2)
    check = HealthCheck(exec=None, failure_threshold=1, sysfs=probe)
    monitor = HealthMonitor("example.com/s", check, lambda: units, lambda _: None, roots=host.roots)
    monkeypatch.setattr("genericdp.health.probe_unit", stuck)
    ids = {u.id for u in units}
    try:
        assert await monitor.probe_once() == ids
        assert await monitor.probe_once() == ids
        assert calls == 1
    finally:
        release.set()
    # The stuck thread returns; then a round reads again, and passes.
    async with asyncio.timeout(10):
        while await monitor.probe_once() != frozenset():  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(0.01)
    assert calls >= 2
