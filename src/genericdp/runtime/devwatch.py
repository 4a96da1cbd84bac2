"""Watch the device root with inotify, so hotplug is seen in well under a second.

What is watched, skipped and batched, and why every change rescans every
resource: docs/contributing/architecture.md, "Hotplug". Symlinked directories
are never followed: udev's links point at nodes, and ``/dev/fd`` points into
``/proc``. Each batch is followed ``late`` seconds later by one more report:
the kernel creates a node before udev has written its database entry, which
udev matchers read. udev writes ``/dev/char/<maj:min>`` and the other links
just before the database, so the batch those links open usually sees the
properties already; the late report is the cheap guarantee. The periodic
rescan stays the safety net for what inotify cannot see (a device root on a
filesystem without inotify, a watch limit reached).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from inotify_simple import flags

from genericdp.aio import inotify_events, wait_event
from genericdp.errors import DiscoveryError, first_of

log = logging.getLogger(__name__)

# Relative to the device root: trees with no device nodes in them. pts gets a
# node per terminal, shm and mqueue are IPC filesystems, hugepages a memory
# filesystem, and LXC puts proc/sys bind mounts under .lxc.
SKIP: frozenset[str] = frozenset({"pts", "shm", "mqueue", "hugepages", ".lxc"})

# udev usually finishes a device within tens of milliseconds of the kernel.
LATE_UDEV_DELAY = 0.5

# ONLYDIR + DONT_FOLLOW: a symlink to a directory is never watched.
_MASK = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM
_MASK |= flags.DELETE_SELF | flags.MOVE_SELF | flags.ONLYDIR | flags.DONT_FOLLOW


class InotifyEvent(Protocol):
    """The part of an inotify event we use (``inotify_simple.Event`` has it)."""

    @property
    def wd(self) -> int: ...
    @property
    def mask(self) -> int: ...
    @property
    def name(self) -> str: ...


@dataclass(frozen=True)
class DevChange:
    """What one batch of events means for discovery and for the watches."""

    paths: frozenset[str] = frozenset()  # entries created or removed, relative to the root
    new_dirs: frozenset[str] = frozenset()  # directories to watch (and walk)
    dropped: frozenset[int] = frozenset()  # watch descriptors the kernel removed
    resync: bool = False  # events were lost or a directory moved: walk the tree again
    root_lost: bool = False  # the device root itself was removed, moved or unmounted
    late: bool = False  # the follow-up for late udev data, not an event

    @property
    def rescan(self) -> bool:
        """Whether discovery should run again."""
        return bool(self.paths) or self.resync or self.root_lost or self.late

    def merge(self, other: DevChange) -> DevChange:
        return DevChange(
            paths=self.paths | other.paths,
            new_dirs=self.new_dirs | other.new_dirs,
            dropped=self.dropped | other.dropped,
            resync=self.resync or other.resync,
            root_lost=self.root_lost or other.root_lost,
            late=self.late or other.late,
        )

    def describe(self, limit: int = 4) -> str:
        """A reason for the log: what changed, in a few words."""
        if self.root_lost:
            return "device root lost"
        if self.resync:
            return "device events lost; rescanning everything"
        if self.late:
            return "late udev data"
        return "device change: " + first_of(sorted(self.paths), limit)


def skipped(relative: str, skip: Iterable[str] = SKIP) -> bool:
    """Whether ``relative`` (to the device root) is, or is inside, a skipped tree."""
    return any(relative == s or relative.startswith(s + "/") for s in skip)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def classify(events: Iterable[InotifyEvent], dirs: Mapping[int, str]) -> DevChange:
    """Turn raw events into one ``DevChange`` (pure); ``dirs`` maps watch descriptors to
    directories relative to the root (``""``). Unknown descriptors and skipped trees
    are ignored."""
    paths: set[str] = set()
    new_dirs: set[str] = set()
    dropped: set[int] = set()
    resync = root_lost = False
    for event in events:
        mask = event.mask
        if mask & flags.Q_OVERFLOW:
            resync = True
            continue
        parent = dirs.get(event.wd)
        if parent is None:
            continue
        is_root = parent == ""
        if mask & flags.IGNORED:  # the kernel removed this watch
            dropped.add(event.wd)
            root_lost = root_lost or is_root
        elif mask & (flags.DELETE_SELF | flags.MOVE_SELF | flags.UNMOUNT):
            if is_root:
                root_lost = True
            elif mask & flags.MOVE_SELF:
                resync = True  # its watch now has a stale path; the parent saw the name go
        else:
            path = _join(parent, event.name)
            if skipped(path):
                continue
            paths.add(path)
            if mask & flags.ISDIR and mask & (flags.CREATE | flags.MOVED_TO):
                new_dirs.add(path)
    return DevChange(frozenset(paths), frozenset(new_dirs), frozenset(dropped), resync, root_lost)


class _Watches:
    """The watch descriptors of one inotify instance, by directory."""

    def __init__(self, inotify: Any, root: Path) -> None:
        self._inotify = inotify
        self._root = root
        self.dirs: dict[int, str] = {}

    def add_tree(self, top: str) -> None:
        """Watch ``top`` and every directory below it (not through symlinks).

        Each directory is watched before it is listed, so an entry made
        meanwhile is either listed or reported.
        """
        stack = [top]
        while stack:
            relative = stack.pop()
            path = self._root / relative if relative else self._root
            try:
                wd: int = self._inotify.add_watch(path, _MASK)
            except OSError as exc:
                self._cannot_watch(relative, path, exc)
                continue
            self.dirs[wd] = relative
            try:
                with os.scandir(path) as entries:
                    children = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue  # gone again; its parent reports that
            for name in children:
                child = _join(relative, name)
                if not skipped(child):
                    stack.append(child)

    def _cannot_watch(self, relative: str, path: Path, exc: OSError) -> None:
        hint = ""
        if exc.errno == errno.ENOSPC:
            hint = " (inotify watch limit: raise fs.inotify.max_user_watches)"
        if not relative:
            raise DiscoveryError(f"cannot watch device root {path}: {exc.strerror}{hint}") from exc
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # not simply gone again
            log.warning(
                "cannot watch %s: %s%s; changes there wait for the periodic rescan",
                path,
                exc.strerror,
                hint,
            )

    def read(self) -> DevChange:
        """Read and classify the waiting events; forget dropped watches, watch new
        directories at once, walk again if events were lost."""
        change = classify(self._inotify.read(timeout=0), self.dirs)
        for wd in change.dropped:
            self.dirs.pop(wd, None)
        if change.resync and not change.root_lost:
            self.resync()
        elif not change.root_lost:
            for relative in sorted(change.new_dirs):
                self.add_tree(relative)
        return change

    def resync(self) -> None:
        """Walk the whole tree again; drop watches of directories no longer in it."""
        old, self.dirs = self.dirs, {}
        self.add_tree("")
        for wd in old.keys() - self.dirs.keys():
            with contextlib.suppress(OSError):  # the kernel dropped it already
                self._inotify.rm_watch(wd)


async def _readable(event: asyncio.Event, timeout: float | None) -> bool:  # noqa: ASYNC109
    """Wait until the inotify fd is readable (and take the event); False on timeout."""
    if not await wait_event(event, timeout):
        return False
    event.clear()
    return True


async def watch_devices(
    root: Path,
    on_change: Callable[[DevChange], None],
    *,
    settle: float = 0.1,
    late: float = LATE_UDEV_DELAY,
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Report batches of changes under ``root`` until cancelled (``late`` 0: no follow-up).
    ``on_ready``: every directory is watched, earlier changes are not reported (the
    caller rescans then). DiscoveryError when the root cannot be watched or goes away."""
    watched = _resolve_root(root)
    async with inotify_events(
        lambda exc: DiscoveryError(f"cannot start inotify for {root}: {exc.strerror}")
    ) as (inotify, readable):
        watches = _Watches(inotify, watched)
        watches.add_tree("")
        on_ready()
        await _report(watches, readable, on_change, settle=settle, late=late)
    raise DiscoveryError(f"device root {root} was removed or replaced; watching it again")


def _resolve_root(root: Path) -> Path:
    """``root`` with symlinks resolved, at each start of the watch: the one symlink we
    follow (``GENERICDP_DEV_ROOT`` may be a link, or under one such as ``/var/run``);
    DONT_FOLLOW on a link would watch the link itself, or fail."""
    try:
        resolved = root.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a loop: add_tree says so, naming root
        return root
    if resolved != root.absolute():
        log.info("device root %s resolves to %s; watching that", root, resolved)
    return resolved


async def _report(
    watches: _Watches,
    readable: asyncio.Event,
    on_change: Callable[[DevChange], None],
    *,
    settle: float,
    late: float,
) -> None:
    """The event loop of ``watch_devices``; returns when the root is lost."""
    loop = asyncio.get_running_loop()
    follow_up: float | None = None
    while True:
        wait = None if follow_up is None else max(0.0, follow_up - loop.time())
        if not await _readable(readable, wait):
            follow_up = None
            on_change(DevChange(late=True))
            continue
        change = watches.read()
        if not change.rescan:
            continue
        deadline = loop.time() + settle  # a fixed window: a busy tree cannot starve us
        while not change.root_lost and (remaining := deadline - loop.time()) > 0:
            if await _readable(readable, remaining):
                change = change.merge(watches.read())
        on_change(change)
        if change.root_lost:
            return
        follow_up = loop.time() + late if late > 0 else None
