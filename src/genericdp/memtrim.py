"""Giving the C allocator's free memory back to the kernel once a burst of work is over.

glibc's ``free`` returns memory to the kernel only from the top of a heap;
pages freed in the middle stay resident until ``malloc_trim`` walks the heaps.
A config reload or a kubelet restart (new gRPC connections, streams and
registrations for every resource) frees a few MiB that way: 1.2-1.8 MiB at 100
resources after the churn of ``./dev bench --short`` (docs/contributing/performance.md).
``Trimmer.poke`` after such work trims once, when nothing more has happened
for ``quiet`` seconds; an idle daemon never wakes for it.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

QUIET = 5.0  # seconds without a poke before the trim


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``; None with another C library (musl has none)."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    return trim


class Trimmer:
    """One ``malloc_trim(0)`` ``quiet`` seconds after the last :meth:`poke`."""

    def __init__(self, quiet: float = QUIET, trim: Callable[[int], int] | None = None) -> None:
        self._quiet = quiet
        self._trim = trim if trim is not None else _malloc_trim()
        self._last = 0.0  # loop time of the last poke
        self._timer: asyncio.TimerHandle | None = None
        self.trims = 0

    def poke(self) -> None:
        """Work that frees memory happened now: trim once it has been quiet a while."""
        if self._trim is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop, no daemon to trim for
        self._last = loop.time()
        if self._timer is None:  # one timer; it re-arms itself while pokes keep coming
            self._timer = loop.call_at(self._last + self._quiet, self._due, loop)

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        due = self._last + self._quiet
        if loop.time() < due:
            self._timer = loop.call_at(due, self._due, loop)
            return
        self._timer = None
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
            log.debug("returned the allocator's free memory to the kernel")

    @property
    def pending(self) -> bool:
        """A trim is due once it has been quiet long enough."""
        return self._timer is not None

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
