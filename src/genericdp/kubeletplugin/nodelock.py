"""One instance of a driver writes the node's slices at a time: a lock on its plugin directory.

A rolling update with ``maxSurge`` (or a second DaemonSet by mistake) runs two instances on a
node, and two publishers would fight over the pool. So the publishing instance holds an
exclusive ``flock`` on ``<plugins dir>/<driver>/lock`` (the Go helper's
``FlockDirectoryPath``). Given a pod UID (``rolling``) the new instance serves claims at once
and only its publisher waits, adopting the slices when the old pod exits. Without one both
would serve the same socket names, so the whole DRA backend of the second waits, not ready,
and takes over (checkpoint, CDI specs, slices) once the first exits. The waiter says whom it
waits for; the kernel drops the lock however its holder dies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from genericdp.errors import GenericdpError, clip
from genericdp.kubeletplugin.lockfile import open_lock_file, try_lock

log = logging.getLogger(__name__)

FILE_NAME = "lock"
POLL = 0.2  # seconds between attempts while another instance holds the lock
WAITING_LOG_EVERY = 30.0  # seconds between the lines saying we still wait
_HOLDER_BYTES = 256


class NodeLockError(GenericdpError):
    """The plugin directory's lock file cannot be opened or locked."""


def _holder(fd: int) -> str:
    """Who wrote the lock file last (the holder's pod name and PID), clipped: it is on the host."""
    try:
        text = os.pread(fd, _HOLDER_BYTES, 0).decode(errors="replace").strip()
    except OSError:
        return "unknown"
    return clip(text, 120) if text.isprintable() and text else "unknown"


def _mark(fd: int) -> None:
    """Say who holds the lock, for the log of the instance that waits (best effort)."""
    text = f"{socket.gethostname()} pid {os.getpid()}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError as exc:
        log.debug("cannot write the DRA lock file's holder: %s", exc)


@asynccontextmanager
async def node_lock(
    plugin_dir: Path, *, poll: float = POLL, rolling: bool = False
) -> AsyncIterator[Path]:
    """Hold the driver's lock on ``plugin_dir``, waiting while another has it (``rolling``:
    only the slices wait). Raises NodeLockError when the lock file cannot be used."""
    path = plugin_dir / FILE_NAME
    waits = (
        "publishing the node's ResourceSlices (serving claims meanwhile)"
        if rolling
        else "serving (not ready meanwhile)"
    )
    fd = await asyncio.to_thread(open_lock_file, path, NodeLockError)
    try:
        if not try_lock(fd, path, NodeLockError):
            started = logged = time.monotonic()
            log.warning(
                "another instance of this DRA driver (%s) holds %s: waiting for it to exit"
                " before %s",
                _holder(fd),
                path,
                waits,
            )
            while not try_lock(fd, path, NodeLockError):
                await asyncio.sleep(poll)
                if time.monotonic() - logged >= WAITING_LOG_EVERY:
                    logged = time.monotonic()
                    log.warning(
                        "still waiting for the other instance (%s) to release %s (%.0fs)",
                        _holder(fd),
                        path,
                        logged - started,
                    )
            log.info(
                "the other instance released %s after %.1fs: taking over",
                path,
                time.monotonic() - started,
            )
        _mark(fd)
        yield path
    finally:
        os.close(fd)  # releases the lock
