"""One inotify instance read from the event loop, shared by the three watches
(kubelet directory, device root, config)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from inotify_simple import INotify


@asynccontextmanager
async def inotify_events(
    on_error: Callable[[OSError], Exception],
) -> AsyncIterator[tuple[INotify, asyncio.Event]]:
    """A non-blocking INotify and an event set whenever it has something to read.

    Closed (and the loop's reader removed) on exit. When inotify cannot start
    (too many instances, say), ``on_error`` turns the OSError into the
    caller's own error, which is raised instead.
    """
    try:
        inotify = INotify(nonblocking=True)
    except OSError as exc:
        raise on_error(exc) from exc
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(inotify.fileno(), readable.set)
    try:
        yield inotify, readable
    finally:
        loop.remove_reader(inotify.fileno())
        inotify.close()
