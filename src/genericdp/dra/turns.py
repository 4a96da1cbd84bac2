"""Prepare and unprepare calls of every instance on the node take turns, under one lock.

During a rolling update two instances serve the node (``socketnames.py``) and the kubelet may
send any call to either, while both keep the claims in one checkpoint. So each call holds an
exclusive ``flock`` on ``<plugins dir>/<driver>/serialize.lock`` (the file the upstream
helper's ``Serialize`` locks) and reads the checkpoint afresh when the other instance replaced
it: the writes of both compose and no claim is lost.

Within one process calls run side by side: the first of a turn takes the lock, calls arriving
meanwhile join it, the last one out lets go (``prepare.py``'s locks order them). A call that
cannot get the lock within ``deadline`` fails each of its claims with a message naming the
lock, and the kubelet retries.

Between turns ``follow`` reloads the checkpoint when another instance replaced it or an
``uncleaned-*.json`` came or went, so health and ``held`` (``usage.py``) include the other's
claims, and an admin's deleting an uncleaned file serves its unit again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from inotify_simple import flags

from genericdp.aio import inotify_events
from genericdp.dra.checkpoint import Checkpoint
from genericdp.errors import GenericdpError, KubeletError
from genericdp.kubeletplugin.lockfile import open_lock_file, try_lock
from genericdp.runtime.uncleaned import PREFIX as UNCLEANED

log = logging.getLogger(__name__)

FILE_NAME = "serialize.lock"
# Below the kubelet's 45 s per call: a call that gives up still answers in time.
DEADLINE = 20.0
_POLL_FIRST, _POLL_MAX = 0.002, 0.05
# The checkpoint is replaced by a rename (``atomicfile.py``), or removed by hand.
_WATCH = flags.MOVED_TO | flags.CREATE | flags.DELETE
_LOST = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED | flags.Q_OVERFLOW


class TurnError(GenericdpError):
    """The node's call lock cannot be had (in time, or at all)."""


class Turns:
    """The node-wide turn of one instance's calls, and its checkpoint kept fresh."""

    def __init__(self, checkpoint: Checkpoint, lock_path: Path) -> None:
        self.checkpoint = checkpoint
        self.path = lock_path
        self.deadline = DEADLINE
        # Called when the recorded claims changed under us.
        self.on_change: Callable[[], None] = lambda: None
        self._entry = asyncio.Lock()
        self._users = 0
        self._fd: int | None = None

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Hold the node's call lock, the checkpoint as every instance left it; raises
        TurnError when the lock cannot be had within the deadline."""
        async with self._entry:
            if self._users == 0:
                self._fd = await _acquire(self.path, self.deadline)
                try:
                    await self._reload()
                except BaseException:
                    self._release()
                    raise
            self._users += 1
        try:
            yield
        finally:
            self._users -= 1
            if self._users == 0:
                self._release()

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # drops the lock

    async def _reload(self) -> None:
        """Read the checkpoint again if another instance replaced it since we last saw it."""
        if not await asyncio.to_thread(self.checkpoint.changed_on_disk):
            return
        before = {p.claim.uid: p for p in self.checkpoint}, dict(self.checkpoint.uncleaned)
        await asyncio.to_thread(self.checkpoint.load)
        after = {p.claim.uid: p for p in self.checkpoint}, dict(self.checkpoint.uncleaned)
        if after[1] != before[1]:
            log.warning(
                "DRA units out of service until their cleanup: %s",
                ", ".join(f"{r} unit {u}" for r, u in sorted(after[1])) or "none now",
            )
        if after[0] != before[0]:
            log.info(
                "DRA checkpoint %s changed by another instance: %d claim(s) prepared",
                self.checkpoint.path,
                len(after[0]),
            )
        if after != before:
            self.on_change()

    async def follow(self) -> None:
        """Reload the checkpoint whenever another instance replaces it. Raises KubeletError
        when the directory cannot be watched (the guard starts over with backoff)."""
        directory = self.checkpoint.path.parent
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
        started = inotify_events(lambda exc: KubeletError(f"cannot start inotify: {exc}"))
        async with started as (inotify, readable):
            try:
                inotify.add_watch(directory, _WATCH | flags.DELETE_SELF | flags.MOVE_SELF)
            except OSError as exc:
                raise KubeletError(f"cannot watch {directory}: {exc.strerror}") from exc
            name, ours = self.checkpoint.path.name, True
            while True:
                if ours:  # after the watch is set: a change just before it is seen here
                    await self.refresh()
                await readable.wait()
                readable.clear()
                events = inotify.read(timeout=0)
                if any(event.mask & _LOST for event in events):
                    raise KubeletError(f"{directory} was removed or replaced; watching again")
                ours = any(
                    event.name == name or event.name.startswith(UNCLEANED) for event in events
                )

    async def refresh(self) -> None:
        """Between turns: take up what another instance wrote (a turn of ours reads it anyway)."""
        try:
            async with self.turn():  # reloads unless a turn is under way
                pass
        except TurnError as exc:
            log.warning("cannot reload the DRA checkpoint: %s", exc)


async def _acquire(path: Path, deadline: float) -> int:
    """An open file descriptor holding the exclusive lock on ``path``; raises TurnError."""
    fd = await asyncio.to_thread(open_lock_file, path, TurnError)
    started = time.monotonic()
    pause = _POLL_FIRST
    try:
        while not try_lock(fd, path, TurnError):
            waited = time.monotonic() - started
            if waited >= deadline:
                raise TurnError(
                    f"another instance of the driver has held {path} for over {deadline:g}s"
                    " (the kubelet tries again)"
                )
            await asyncio.sleep(min(pause, deadline - waited))
            pause = min(pause * 2, _POLL_MAX)
    except BaseException:
        os.close(fd)
        raise
    return fd
