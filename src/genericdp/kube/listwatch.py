"""List, then watch from the list's resourceVersion: the loop every watch of the API runs.

Each watch request is ended by the server after a few minutes (``timeoutSeconds``,
jittered) so a half-open connection is noticed. Whatever ends a watch, the next request
waits for our ``Backoff``: a server that ends every watch at once never gets a tight loop.

It lists again on a version the server cannot watch from (410 Gone: older than it keeps;
504 "Too large resource version": newer than its watch cache, seen on an API server
whose cache has had no event of the kind since it started), every ``resync`` (give or
take a tenth) if set, and after a watch kept open past its ``timeoutSeconds`` and a
margin (silent, or trickling) or one whose stream broke its form (``BrokenWatchError``):
whatever it held back is in the list. Failures are logged, never raised to its task.
The requests are its source's (``Followed``): the tests run it over an in-memory store.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from genericdp.aio import Backoff, Sleep, next_by
from genericdp.errors import GenericdpError

log = logging.getLogger(__name__)

# The server ends each watch after this long (give or take a tenth).
WATCH_SECONDS = 300
# A watch still open this long after its timeoutSeconds is closed and listed again.
WATCH_MARGIN = 30.0
SPREAD = 0.1  # the fraction by which watch lengths and resyncs are jittered
# Why a watch was opened again (``ListWatch.restarts``): the server ended it, its
# version could not be watched from, or it failed (an error answer, the connection lost).
RESTART_REASONS = ("ended", "expired", "failed")
# Seconds between warnings while the API server stays unreachable (every node
# loses it at once when it restarts: one line each, not one per retry).
FAILURE_LOG_EVERY = 30.0


class ExpiredError(GenericdpError):
    """A watch's resourceVersion cannot be watched from (410 Gone, or 504 too large): list again."""


class BrokenWatchError(GenericdpError):
    """A watch stream that broke its form (silent past its end, an event too long): list again."""


class Followed(Protocol):
    """What a ``ListWatch`` keeps up with."""

    async def relist(self) -> str:
        """List, take in what the list holds; its resourceVersion."""

    def follow(self, version: str, seconds: int) -> AsyncIterator[str]:
        """One watch request from ``version`` that the server ends after ``seconds``:
        take in each event, yield its resourceVersion."""


@dataclass
class ListWatch:
    """Runs ``source``'s list and watches until cancelled (``what`` names it in the log)."""

    what: str
    source: Followed
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=0.5, maximum=30.0))
    resync: float | None = None  # seconds between lists (None: only when needed)
    sleep: Sleep | None = None
    rng: random.Random = field(default_factory=random.Random)
    restarts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RESTART_REASONS, 0))
    watch_seconds: int = WATCH_SECONDS  # the timeoutSeconds asked of the server (jittered)
    margin: float = WATCH_MARGIN
    _failing_since: float | None = field(default=None, init=False)  # a run of failures began

    async def run(self, version: str | None = None) -> None:
        """Watch from ``version`` (a list the caller made), else list first."""
        sleep = self.sleep or asyncio.sleep
        loop = asyncio.get_running_loop()
        resync_at = math.inf
        if version is not None and self.resync is not None:
            resync_at = loop.time() + self._spread(self.resync)
        last_warning = -math.inf
        while True:
            started = loop.time()
            try:
                if version is None or started >= resync_at:
                    version = await self.source.relist()
                    self._answered(loop.time())
                    if self.resync is not None:
                        resync_at = loop.time() + self._spread(self.resync)
                seconds = self._spread(self.watch_seconds)
                seconds = max(1, math.ceil(min(seconds, resync_at - loop.time())))
                version = await self._watch(version, seconds)
                reason = "ended"
                log.debug("the watch of %s ended after %.1fs", self.what, loop.time() - started)
            except ExpiredError as err:
                log.info("the watch of %s: %s: listing again", self.what, err)
                version, reason = None, "expired"
            except BrokenWatchError as err:
                log.warning(
                    "the watch of %s broke: %s (listing again after a backoff)", self.what, err
                )
                version, reason = None, "failed"
            except Exception as err:  # noqa: BLE001 -- whatever ends a watch, it is watched again
                last_warning = self._failed(err, loop.time(), last_warning)
                reason = "failed"
            self.restarts[reason] += 1
            if loop.time() - started > self.backoff.maximum:
                self.backoff.reset()  # it watched fine for a while
            await sleep(self.backoff.next())

    async def _watch(self, version: str, seconds: int) -> str:
        """One watch from ``version``: the last version seen. BrokenWatchError when still
        open ``margin`` after ``seconds``."""
        loop = asyncio.get_running_loop()
        events = self.source.follow(version, seconds)
        deadline = loop.time() + seconds + self.margin
        while True:
            try:
                seen = await next_by(events, deadline)
            except StopAsyncIteration:
                return version
            except TimeoutError as err:
                raise BrokenWatchError(
                    f"the API server kept the watch open past its {seconds}s timeout and a"
                    f" {self.margin:g}s margin: closed"
                ) from err
            self._answered(loop.time())
            # A watch that fails goes on from its last event; never from none
            # (a watch without a version waits for the server's cache).
            version = seen or version

    def _failed(self, err: Exception, now: float, last_warning: float) -> float:
        """Log a failure (a warning once in ``FAILURE_LOG_EVERY``); the last warning's time."""
        if self._failing_since is None or now - last_warning >= FAILURE_LOG_EVERY:
            log.warning(
                "the watch of %s failed: %s (retrying with backoff)", self.what, describe(err)
            )
            last_warning = now
        else:
            log.debug("the watch of %s failed again: %s", self.what, describe(err))
        if self._failing_since is None:
            self._failing_since = now
        return last_warning

    def _answered(self, now: float) -> None:
        """The server answered: say so once after failures (they are warned of once)."""
        if self._failing_since is not None:
            log.info(
                "the watch of %s: the API server answers again after %.1fs",
                self.what,
                now - self._failing_since,
            )
            self._failing_since = None

    def _spread(self, seconds: float) -> float:
        return seconds * (1.0 - SPREAD + 2 * SPREAD * self.rng.random())


def describe(err: Exception) -> str:
    """What ended a watch, for a log line."""
    if isinstance(err, GenericdpError):
        return str(err)
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def version_of(obj: Mapping[str, Any]) -> str:
    """An object's (or a list's) ``metadata.resourceVersion``; "" when it has none."""
    metadata = obj.get("metadata")
    return str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""
