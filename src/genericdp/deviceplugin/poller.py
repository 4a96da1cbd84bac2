"""The PodResources poller: one task for the daemon, the kubelet's List diffed for releases."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Protocol

from genericdp.aio import wait_event
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.errors import KubeletError, clip
from genericdp.kubelet.podresources import PodDevices, PodResourcesLister
from genericdp.runtime.owed import Release

log = logging.getLogger(__name__)


class ListPods(Protocol):
    """A ``PodResourcesLister``, or a stand-in with its signature."""

    def __call__(
        self, socket: Path, *, timeout: float = 5.0, resources: AbstractSet[str] | None = None
    ) -> Awaitable[tuple[PodDevices, ...]]: ...


# Seconds between Lists while nothing is held (``ReleasePoller``): a safety net only.
REST = 60.0
# Seconds from a hand-out to the List that looks for it; doubled at each List
# that does not show it yet, up to the interval (``ReleasePoller``).
CONFIRM = 0.25


class ReleasePoller:
    """Polls PodResources List every ``interval`` (while ``active()``) and hands releases
    to ``dispatch``; ``on_observed`` runs after every answer that can change a list.
    A failed List changes nothing and is logged once per outage.

    While nothing is held (``UsageTracker.holds_nothing``) it rests: only an
    Allocate can make something held (after a restart the kubelet keeps the
    assignments it had, which were none), so one List every ``rest`` seconds is
    a safety net. A hand-out is looked for ``CONFIRM`` seconds later, then at
    doubling gaps up to ``interval``: the kubelet records it as our Allocate
    returns, before the pod's sandbox exists, so a pod seen once is cleaned
    however short its life (one that ended unseen, at its unit's next Allocate).
    """

    def __init__(
        self,
        socket: Path,
        tracker: UsageTracker,
        dispatch: Callable[[tuple[Release, ...]], None],
        *,
        interval: float,
        active: Callable[[], bool] = lambda: True,
        resources: Callable[[], AbstractSet[str] | None] = lambda: None,
        on_observed: Callable[[], None] = lambda: None,
        list_pods: ListPods | None = None,
        timeout: float = 5.0,
        rest: float = REST,
    ) -> None:
        self._socket = socket
        self._tracker = tracker
        self._dispatch = dispatch
        self._interval = interval
        self._rest = max(rest, interval)
        self._active = active
        self._resources = resources
        self._on_observed = on_observed
        # One channel for the poller's life (PodResourcesLister), unless told otherwise.
        self._own_lister: PodResourcesLister | None = None
        if list_pods is None:
            list_pods = self._own_lister = PodResourcesLister()
        self._list: ListPods = list_pods
        self._timeout = timeout
        self._failing = False

    async def run(self) -> None:
        """Poll until cancelled."""
        try:
            confirm = CONFIRM
            while True:
                self._tracker.handing_out.clear()
                await self.poll()
                if self._failing:
                    await asyncio.sleep(self._interval)
                    continue
                gap = self._rest if self._tracker.holds_nothing() else self._interval
                if self._tracker.awaiting_list():
                    gap, confirm = min(gap, confirm), confirm * 2
                else:
                    confirm = CONFIRM
                # Polling is the only way to learn; a hand-out is looked for soon.
                if await wait_event(self._tracker.handing_out, gap):
                    confirm = CONFIRM
                    await asyncio.sleep(min(confirm, self._interval))
        finally:
            if self._own_lister is not None:
                await self._own_lister.close()

    async def poll(self) -> bool:
        """One List and diff; False when nothing was learnt."""
        if not self._active():
            if self._tracker.has_baseline:
                self._tracker.forget()
            return False
        try:
            pods = await self._list(
                self._socket, timeout=self._timeout, resources=self._resources()
            )
        except KubeletError as exc:
            if not self._failing:
                log.warning(
                    "cannot read PodResources, no cleanup and no release of held IDs"
                    " until it answers: %s",
                    exc,
                )
            self._failing = True
            self._tracker.settled.set()  # nothing to wait for: register with what we know
            return False
        if self._failing:
            log.info("PodResources %s answers again", self._socket)
            self._failing = False
        if self._tracker.repeats(pods):
            return True  # nothing released, nothing any resource lists differently
        first = not self._tracker.has_baseline
        releases = self._tracker.observe(pods)
        if first:
            log.info("PodResources baseline: %s", _describe(self._tracker.snapshot()))
        if releases:
            self._dispatch(releases)
        self._tracker.settled.set()
        self._on_observed()
        return True


def _describe(in_use: Mapping[str, AbstractSet[str]]) -> str:
    if not in_use:
        return "no devices in use"
    return "; ".join(f"{clip(r)}: {len(ids)} in use" for r, ids in sorted(in_use.items()))
