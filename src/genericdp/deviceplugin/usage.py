"""Release tracking: the kubelet never says when a device is free.

A unit is *in use* while PodResources ``List`` shows any of its replica IDs,
and *released* when the last one goes. List alone misses two things, so
Allocate tells us too (``claim``, ``handed_out``): the kubelet may hand a
device out again before a poll sees it free (and kubelets without
kubernetes#132028 keep listing ended pods not deleted yet), and a device only
a plain init container got is never listed. No timer: an init container may
run for hours, and cleaning a device under it is worse than cleaning late.
The whole story: docs/contributing/architecture.md, "Release and cleanup".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable

from genericdp.deviceplugin.holders import HANDED_OUT, Holder, holders_by_device, released_units
from genericdp.kubelet.devices import unit_id_of
from genericdp.kubelet.podresources import PodDevices
from genericdp.runtime.owed import Release


class UsageTracker:
    """Who holds which device, from List and from our own Allocate calls."""

    def __init__(self) -> None:
        self._holders: dict[str, dict[str, set[Holder]]] = {}
        # (resource, device, holder) the kubelet gave up (it handed the device
        # out again) but List still shows: a terminated pod not yet deleted.
        self._stale: set[tuple[str, str, Holder]] = set()
        # resource -> unit -> held replica IDs, built on demand from _holders
        # (so an Allocate's claim never scans everything held).
        self._unit_counts: dict[str, Counter[str]] = {}
        self.has_baseline = False  # a List has answered since start (or ``forget``)
        # Lists answered so far, and the count when our Allocate gave each ID out (``held``).
        self._lists = 0
        self._handed_at: dict[tuple[str, str], int] = {}
        # The last List answer taken (``holders_by_device``'s view of it), kept
        # while nothing but Lists changed what is held: see ``repeats``.
        self._last_listed: dict[str, dict[str, set[Holder]]] | None = None
        # The answer object it came from: the lister hands the same one back for
        # an answer that repeats the last one byte for byte (PodResourcesLister).
        self._last_pods: object = None
        # resource -> called after our Allocate changed what it holds (handed_out, claim)
        self._watchers: dict[str, Callable[[], None]] = {}
        self.settled = asyncio.Event()  # the first List answered or failed
        # Set by every hand-out: the poller, resting while nothing is held, wakes.
        self.handing_out = asyncio.Event()

    def holds_nothing(self) -> bool:
        """Whether a List answered and nobody holds anything of ours: neither a
        container List showed nor an ID our Allocate gave out."""
        return self.has_baseline and not any(
            holders for devices in self._holders.values() for holders in devices.values()
        )

    def awaiting_list(self) -> bool:
        """Whether an ID our Allocate gave out has not been shown by a List yet."""
        return bool(self._handed_at)

    def in_use(self, resource: str) -> frozenset[str]:
        return frozenset(d for d, h in self._holders.get(resource, {}).items() if h)

    def units_in_use(self, resource: str) -> frozenset[str]:
        return frozenset(u for u, n in self._held_units(resource).items() if n > 0)

    def watch(self, resource: str, callback: Callable[[], None] | None) -> None:
        """``HandOuts.watch``; a List's changes reach the poller's ``on_observed``."""
        if callback is None:
            self._watchers.pop(resource, None)
        else:
            self._watchers[resource] = callback

    def _changed(self, resource: str) -> None:
        callback = self._watchers.get(resource)
        if callback is not None:
            callback()

    def held(self, resource: str) -> frozenset[str]:
        """IDs held as far as the device list is concerned: unlike ``in_use``, not an ID
        our Allocate gave out that a whole List begun afterwards did not show (a pod
        that ended within one poll), so the kubelet never sees more free IDs than
        configured."""
        devices = self._holders.get(resource, {})
        return frozenset(
            d
            for d, h in devices.items()
            if h - {HANDED_OUT}
            or self._handed_at.get((resource, d), self._lists) + 1 >= self._lists
        )

    def snapshot(self) -> dict[str, frozenset[str]]:
        return {r: ids for r in self._holders if (ids := self.in_use(r))}

    def forget(self) -> None:
        """Drop the List view (nobody needs it now); the next List is a new baseline."""
        self._holders = {
            r: {d: {HANDED_OUT} for d, h in devices.items() if HANDED_OUT in h}
            for r, devices in self._holders.items()
        }
        self._stale.clear()
        self._unit_counts = {}
        self.has_baseline = False
        self._last_listed = None

    def repeats(self, pods: Iterable[PodDevices]) -> bool:
        """Take a List answer if ``observe`` would find no release and change no view
        (the same holders, no hand-out, claim or ``forget`` since, no hand-out waiting
        for a whole List to miss it); whether it did. False: call ``observe``."""
        if self._last_listed is None:
            return False
        if any(n + 1 >= self._lists for n in self._handed_at.values()):
            return False  # counting this List may drop such an ID from ``held``
        same = pods is self._last_pods  # the lister's answer to repeated bytes
        if not same and holders_by_device(pods) != self._last_listed:
            return False
        self._last_pods = pods
        self._lists += 1  # a List answered, as ``observe`` counts it
        return True

    def observe(self, pods: Iterable[PodDevices]) -> tuple[Release, ...]:
        """Take a List answer; the units it shows released. The first is the baseline:
        what was in use before we looked is not ours to clean."""
        listed = holders_by_device(pods)
        self._last_listed = listed
        self._last_pods = pods
        # A stale holder that List stopped showing is gone for good (List has
        # no pod UID: a new pod of the same name must not stay ignored).
        self._stale = {(r, d, h) for r, d, h in self._stale if h in listed.get(r, {}).get(d, ())}
        current: dict[str, dict[str, set[Holder]]] = {}
        for resource, devices in listed.items():
            for device_id, holders in devices.items():
                live = {h for h in holders if (resource, device_id, h) not in self._stale}
                if live:
                    current.setdefault(resource, {})[device_id] = live
        for resource, devices in self._holders.items():
            for device_id, holders in devices.items():
                confirmed = device_id in current.get(resource, {})
                if HANDED_OUT in holders and not confirmed:
                    current.setdefault(resource, {})[device_id] = {HANDED_OUT}
        previous = self.snapshot()
        self._holders = current
        self._unit_counts = {}
        self._lists += 1
        self._handed_at = {
            (r, d): n
            for (r, d), n in self._handed_at.items()
            if current.get(r, {}).get(d) == {HANDED_OUT}
        }
        if not self.has_baseline:
            self.has_baseline = True
            return ()
        return released_units(previous, self.snapshot())

    def claim(self, resource: str, device_ids: Iterable[str]) -> tuple[Release, ...]:
        """The kubelet is giving these IDs out: whoever held them is done. The units this
        releases (their cleanup runs first); costs what the request names only."""
        held = self._held_units(resource)  # before the pops below
        devices = self._holders.get(resource, {})
        freed: dict[str, list[str]] = {}
        for device_id in dict.fromkeys(device_ids):
            holders = devices.pop(device_id, set())
            if holders:
                freed.setdefault(unit_id_of(device_id), []).append(device_id)
            self._stale.update((resource, device_id, h) for h in holders if h != HANDED_OUT)
        for unit_id, ids in freed.items():
            held[unit_id] -= len(ids)
        if freed:
            self._last_listed = None  # holders ignored from now on: the next List is news
            self._changed(resource)
        return tuple(
            Release(resource, unit_id, tuple(sorted(ids)))
            for unit_id, ids in sorted(freed.items())
            if held[unit_id] <= 0
        )

    def _held_units(self, resource: str) -> Counter[str]:
        """Unit -> how many of its replica IDs are held (kept in step with ``_holders``)."""
        counts = self._unit_counts.get(resource)
        if counts is None:
            devices = self._holders.get(resource, {})
            counts = Counter(unit_id_of(d) for d, h in devices.items() if h)
            self._unit_counts[resource] = counts
        return counts

    def handed_out(self, resource: str, device_ids: Iterable[str]) -> None:
        """Our Allocate gave these IDs to a container: in use until List says otherwise."""
        devices = self._holders.setdefault(resource, {})
        held = self._held_units(resource)
        for device_id in device_ids:
            holders = devices.setdefault(device_id, set())
            if not holders:
                held[unit_id_of(device_id)] += 1
            holders.add(HANDED_OUT)
            self._handed_at[(resource, device_id)] = self._lists
        self._last_listed = None  # the next List confirms the hand-out or not
        self.handing_out.set()
        self._changed(resource)
