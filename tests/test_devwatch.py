"""The device-root watch: event classification (pure) and real inotify on temp trees.

The real-inotify tests change the tree without awaiting in between, so every
event is queued before the watch reads any: what one batch holds is then
deterministic, and a test that expects one batch can fail when there are two.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest
from inotify_simple import flags

from genericdp.errors import DiscoveryError
from genericdp.runtime.devwatch import DevChange, classify, skipped, watch_devices
from tests.fakesys import FakeHost


class Ev(NamedTuple):
    wd: int
    mask: int
    name: str = ""


ROOT_WD = 1
DIRS = {ROOT_WD: "", 2: "serial", 3: "serial/by-id"}


# -- classify (pure) ---------------------------------------------------------------


def test_created_and_deleted_entries_are_reported_relative_to_the_root() -> None:
    """Nodes and links created or removed anywhere watched are paths relative to the root."""
    change = classify(
        [
            Ev(ROOT_WD, flags.CREATE, "ttyUSB0"),
            Ev(3, flags.CREATE, "usb-FTDI_A1-if00-port0"),
            Ev(ROOT_WD, flags.DELETE, "ttyACM0"),
            Ev(2, flags.MOVED_TO, "by-path"),
        ],
        DIRS,
    )
    assert change.paths == {
        "ttyUSB0",
        "serial/by-id/usb-FTDI_A1-if00-port0",
        "ttyACM0",
        "serial/by-path",
    }
    assert change.rescan
    assert not change.new_dirs
    assert not change.resync


def test_new_directories_are_to_be_watched_but_symlinks_to_directories_are_not() -> None:
    """A created or moved-in directory is watched; a symlink (no ISDIR) is only a change."""
    change = classify(
        [
            Ev(ROOT_WD, flags.CREATE | flags.ISDIR, "dri"),
            Ev(2, flags.MOVED_TO | flags.ISDIR, "by-path"),
            Ev(ROOT_WD, flags.CREATE, "fd"),  # /dev/fd -> /proc/self/fd
            Ev(ROOT_WD, flags.DELETE | flags.ISDIR, "snd"),
        ],
        DIRS,
    )
    assert change.new_dirs == {"dri", "serial/by-path"}
    assert change.paths == {"dri", "serial/by-path", "fd", "snd"}


def test_skipped_trees_are_not_changes() -> None:
    """/dev/shm, pts, mqueue, hugepages (and their creation) never ask for a rescan."""
    dirs = {ROOT_WD: "", 7: "shm", 8: "pts"}
    change = classify(
        [
            Ev(ROOT_WD, flags.CREATE | flags.ISDIR, "shm"),
            Ev(ROOT_WD, flags.CREATE | flags.ISDIR, "mqueue"),
            Ev(7, flags.CREATE, "sem.foo"),
            Ev(8, flags.CREATE, "3"),
        ],
        dirs,
    )
    assert change == DevChange()
    assert not change.rescan


def test_skip_matches_whole_path_components_only() -> None:
    """``shm`` skips shm and shm/x, not shmem or a nested dir named shm."""
    assert skipped("shm")
    assert skipped("shm/a/b")
    assert not skipped("shmem")
    assert not skipped("foo/shm")
    assert skipped("bus/usb/001", {"bus/usb"})


def test_overflow_asks_for_a_full_resync() -> None:
    """A queue overflow means lost events: rescan and walk the tree again."""
    change = classify([Ev(-1, flags.Q_OVERFLOW)], DIRS)
    assert change.resync
    assert change.rescan
    assert "lost" in change.describe()


def test_root_removed_moved_or_unmounted_is_lost() -> None:
    """DELETE_SELF, MOVE_SELF, UNMOUNT or IGNORED of the root mean the watch must start over."""
    for mask in (flags.DELETE_SELF, flags.MOVE_SELF, flags.UNMOUNT, flags.IGNORED):
        change = classify([Ev(ROOT_WD, mask)], DIRS)
        assert change.root_lost, mask
        assert change.rescan


def test_subdirectory_removed_drops_its_watch_only() -> None:
    """A removed subdirectory's watch is forgotten; its parent's DELETE is the change."""
    change = classify(
        [
            Ev(2, flags.DELETE | flags.ISDIR, "by-id"),
            Ev(3, flags.DELETE_SELF),
            Ev(3, flags.IGNORED),
        ],
        DIRS,
    )
    assert change.dropped == {3}
    assert change.paths == {"serial/by-id"}
    assert not change.root_lost
    assert not change.resync


def test_subdirectory_moved_asks_for_resync() -> None:
    """A moved directory keeps its watch under a stale path: walk again to fix the map."""
    change = classify([Ev(3, flags.MOVE_SELF)], DIRS)
    assert change.resync


def test_events_of_forgotten_watches_are_ignored() -> None:
    """Events still queued for a watch we already dropped are not changes."""
    assert classify([Ev(99, flags.CREATE, "x")], DIRS) == DevChange()


def test_merge_and_describe() -> None:
    """Merged batches keep every path; the reason names a few of them."""
    a = DevChange(paths=frozenset({"ttyUSB0", "ttyUSB1"}))
    b = DevChange(paths=frozenset({"ttyUSB2", "serial/by-id/x", "serial/by-path/y"}))
    merged = a.merge(b)
    assert len(merged.paths) == 5
    assert merged.describe() == (
        "device change: serial/by-id/x, serial/by-path/y, ttyUSB0, ttyUSB1 and 1 more"
    )
    assert DevChange(late=True).describe() == "late udev data"
    assert DevChange(root_lost=True).describe() == "device root lost"


# -- real inotify ----------------------------------------------------------------


@dataclass
class Recorder:
    """Collects the batches a running watch reports."""

    changes: list[DevChange] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, change: DevChange) -> None:
        self.changes.append(change)
        old, self._changed = self._changed, asyncio.Event()
        old.set()

    async def wait(
        self,
        predicate: Callable[[list[DevChange]], bool],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> None:
        async with asyncio.timeout(timeout):
            while not predicate(self.changes):
                changed = self._changed
                await changed.wait()

    async def wait_path(self, path: str, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        await self.wait(lambda cs: any(path in c.paths for c in cs), timeout)

    @property
    def batches(self) -> list[DevChange]:
        return [c for c in self.changes if not c.late]


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    root = tmp_path / "dev"
    root.mkdir()
    return root


def max_queued_events() -> int:
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def move(source: Path, target: Path) -> None:
    source.rename(target)


def flood(root: Path, events: int) -> None:
    """At least ``events`` inotify events in ``root``: renames (two events each, never merged)."""
    a, b = root / "flood-a", root / "flood-b"
    a.write_text("")
    for _ in range(events // 2 + 10):
        os.rename(a, b)
        os.rename(b, a)


@asynccontextmanager
async def watching(
    root: Path, *, settle: float = 0.05, late: float = 0.2
) -> AsyncIterator[tuple[Recorder, asyncio.Task[None]]]:
    recorder = Recorder()
    ready = asyncio.Event()
    task = asyncio.create_task(
        watch_devices(root, recorder, settle=settle, late=late, on_ready=ready.set),
        name="test-device-watch",
    )
    try:
        await asyncio.wait_for(asyncio.shield(ready.wait()), 5)
        yield recorder, task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_new_node_is_one_batch_then_one_late_report(dev: Path) -> None:
    """Creating a node is reported once, then once more for late udev data."""
    async with watching(dev) as (rec, _):
        (dev / "ttyUSB0").write_text("")
        await rec.wait(lambda cs: any(c.late for c in cs))
        assert [c.paths for c in rec.changes[:1]] == [{"ttyUSB0"}]
        assert len(rec.changes) == 2
        assert rec.changes[1].late


async def test_udev_storm_is_one_batch(tmp_path: Path) -> None:
    """A dongle with four ttys, their by-id, by-path and char links, and its usb node: one batch."""
    host = FakeHost(tmp_path / "host")
    async with watching(host.dev) as (rec, _):
        host.add_usb_serial(ttys=("ttyUSB0", "ttyUSB1", "ttyUSB2", "ttyUSB3"))
        await rec.wait(lambda cs: any(c.late for c in cs))
        assert len(rec.batches) == 1
        batch = rec.batches[0]
        assert {"ttyUSB0", "ttyUSB3", "serial", "char", "bus"} <= batch.paths
        # Directories made in the same burst are watched: removal is seen in them.
        host.remove("/dev/ttyUSB0")
        await rec.wait(lambda cs: len([c for c in cs if not c.late]) == 2)
        removal = rec.batches[1].paths
        assert "serial/by-id/usb-FTDI_FT232R_USB_UART_A1B2C3-if00-port0" in removal
        assert "bus/usb/001/002" in removal


async def test_new_subdirectories_are_watched(dev: Path) -> None:
    """A directory tree created after start (dri, bus/usb/001) is watched to its leaves."""
    async with watching(dev) as (rec, _):
        (dev / "dri").mkdir()
        (dev / "bus" / "usb" / "001").mkdir(parents=True)
        await rec.wait_path("bus")
        (dev / "dri" / "renderD129").write_text("")
        (dev / "bus" / "usb" / "001" / "002").write_text("")
        await rec.wait(
            lambda cs: any("dri/renderD129" in c.paths and "bus/usb/001/002" in c.paths for c in cs)
        )


async def test_removed_subdirectory_can_come_back(dev: Path) -> None:
    """A removed directory's watch is dropped; made again, it is watched again."""
    (dev / "snd").mkdir()
    async with watching(dev) as (rec, _):
        (dev / "snd").rmdir()
        await rec.wait_path("snd")
        (dev / "snd").mkdir()
        await rec.wait(lambda _cs: len(rec.batches) >= 2)
        (dev / "snd" / "controlC0").write_text("")
        await rec.wait_path("snd/controlC0")


async def test_skipped_trees_and_symlinked_directories_are_not_watched(
    dev: Path, tmp_path: Path
) -> None:
    """Activity in /dev/shm, /dev/pts or behind a symlinked directory is not reported."""
    outside = tmp_path / "proc-self-fd"
    outside.mkdir()
    (dev / "fd").symlink_to(outside)
    for name in ("shm", "pts", "mqueue"):
        (dev / name).mkdir()
    async with watching(dev) as (rec, _):
        for i in range(50):
            (dev / "shm" / f"seg{i}").write_text("x")
            (dev / "shm" / f"seg{i}").unlink()
        (dev / "pts" / "7").write_text("")
        (dev / "mqueue" / "q").write_text("")
        (outside / "3").write_text("")
        (dev / "marker").write_text("")  # queued after all of the above
        await rec.wait_path("marker")
        assert rec.batches[0].paths == {"marker"}


async def test_overflow_rescans_and_watches_again(dev: Path) -> None:
    """When the kernel drops events the watch reports a resync and keeps working."""
    limit = max_queued_events()
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to overflow it")
    async with watching(dev) as (rec, _):
        flood(dev, limit)  # nothing reads meanwhile: the queue overflows
        (dev / "late").mkdir()  # its event is lost: only the resync can watch it
        await rec.wait(lambda cs: any(c.resync for c in cs), timeout=30)
        (dev / "late" / "node").write_text("")
        await rec.wait_path("late/node")


async def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    """A device root that does not exist raises DiscoveryError naming it."""
    root = tmp_path / "nope"
    with pytest.raises(DiscoveryError, match=f"cannot watch device root {root}"):
        await watch_devices(root, lambda _change: None)


async def test_root_removed_is_reported_then_an_error(dev: Path, tmp_path: Path) -> None:
    """Moving the root away reports a final rescan, then raises so the guard restarts us."""
    async with watching(dev) as (rec, task):
        move(dev, tmp_path / "elsewhere")
        await rec.wait(lambda cs: any(c.root_lost for c in cs))
        with pytest.raises(DiscoveryError, match="removed or replaced"):
            await asyncio.wait_for(task, 5)


async def test_late_report_is_coalesced_and_can_be_turned_off(dev: Path) -> None:
    """Batches close together share one late report; late=0 sends none."""
    async with watching(dev, late=1.0) as (rec, _):
        (dev / "a").write_text("")
        await rec.wait_path("a")
        (dev / "b").write_text("")  # before a's late report is due
        await rec.wait(lambda cs: any(c.late for c in cs))
        assert [c.late for c in rec.changes] == [False, False, True]
    async with watching(dev, late=0.0) as (rec, task):
        (dev / "c").write_text("")
        await rec.wait_path("c")
        (dev / "d").write_text("")
        await rec.wait_path("d")
        assert not any(c.late for c in rec.changes)
        assert not task.done()


async def test_events_spread_within_the_settle_window_are_one_batch(dev: Path) -> None:
    """udev makes links a little after the kernel's node: one batch while within ``settle``."""
    async with watching(dev, settle=0.6, late=0.0) as (rec, _):
        (dev / "ttyACM0").write_text("")  # the kernel's node
        await asyncio.sleep(0.1)  # not a wait for behaviour: udev's delay, simulated
        (dev / "char").mkdir()  # udev's links, later
        await rec.wait(bool)
        assert [c.paths for c in rec.changes] == [{"ttyACM0", "char"}]


@pytest.mark.parametrize("link", ["root", "parent"])
async def test_a_symlinked_root_gets_hotplug(dev: Path, tmp_path: Path, link: str) -> None:
    """A device root that is (or lies under) a symlink is watched: new nodes are seen at once."""
    if link == "root":
        root = tmp_path / "dev-link"
        root.symlink_to(dev)
    else:
        (tmp_path / "parent-link").symlink_to(tmp_path)
        root = tmp_path / "parent-link" / "dev"
    async with watching(root) as (rec, _):
        (dev / "ttyUSB0").write_text("")
        await rec.wait_path("ttyUSB0")
