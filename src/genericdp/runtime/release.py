"""Release tracking and cleanup: the kubelet never says when a device is free.

The kubelet has no deallocation call. We poll its PodResources ``List`` and
diff: a unit is *in use* while any of its replica IDs is listed for its
resource, and *released* when the last one goes. Released units run the
``cleanup`` hook; while it runs they are advertised Unhealthy (so the kubelet
does not pick them) and Allocate refuses them.

List alone misses two things, so Allocate tells us too (``UsageTracker.claim``
and ``handed_out``):

- The kubelet may hand a device out again before our next poll sees it free,
  and kubelets without kubernetes#132028 (2025) keep listing the devices of
  ended pods not deleted yet, while their device manager already reuses them. An
  Allocate for an ID that List still shows held means its holder is done:
  that holder is ignored from then on, and if that releases the unit its
  cleanup runs before the Allocate goes on.
- List shows app containers (and sidecars) only: a device that only a plain
  init container got is never listed. IDs our Allocate gave out stay in use
  until List shows a holder for them, or until the kubelet asks for them
  again (then cleanup runs first). No timer: an init container may run for
  hours, and cleaning a device under it is worse than cleaning late.

Pieces: ``released_units`` (the pure diff), ``UsageTracker`` (the daemon's
view of who holds what), ``ReleasePoller`` (one task for the daemon), and
``Cleaner`` (one per resource: runs the hook, keeps the unit out of service
until it succeeds).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from genericdp import logsetup
from genericdp.aio import Backoff, TaskSet, wait_event
from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import HookError, KubeletError
from genericdp.hooks import CLEANUP, HookRun
from genericdp.kubelet.devices import unit_id_of
from genericdp.kubelet.podresources import PodDevices, PodResourcesLister
from genericdp.runtime.context import ResourceContext
from genericdp.runtime.state import DeviceState

log = logging.getLogger(__name__)

Holder = tuple[str, str, str]  # namespace, pod, container
# Our Allocate gave the ID out and List has not shown its holder (yet).
HANDED_OUT: Holder = ("", "", "")


class ListPods(Protocol):
    """``list_pod_devices`` (``PodResourcesLister``), or a stand-in with its signature."""

    def __call__(
        self,
        socket: Path,
        *,
        timeout: float = 5.0,
    ) -> Awaitable[tuple[PodDevices, ...]]: ...


@dataclass(frozen=True, order=True)
class Release:
    """A unit of ``resource`` that nobody holds any more."""

    resource: str
    unit_id: str
    device_ids: tuple[str, ...]  # the replica IDs that were in use, sorted


def released_units(
    previous: Mapping[str, Set[str]], current: Mapping[str, Set[str]]
) -> tuple[Release, ...]:
    """Units with a replica in use in ``previous`` and none in ``current`` (per resource).

    Both map a resource name to its in-use device IDs; a missing resource
    holds nothing. Sorted by resource, then unit.
    """
    releases: list[Release] = []
    for resource, before in previous.items():
        still = {unit_id_of(d) for d in current.get(resource, ())}
        gone: dict[str, list[str]] = {}
        for device_id in before:
            unit_id = unit_id_of(device_id)
            if unit_id not in still:
                gone.setdefault(unit_id, []).append(device_id)
        releases.extend(Release(resource, u, tuple(sorted(ids))) for u, ids in gone.items())
    return tuple(sorted(releases))


def holders_by_device(pods: Iterable[PodDevices]) -> dict[str, dict[str, set[Holder]]]:
    """resource -> device ID -> the containers List says hold it."""
    held: dict[str, dict[str, set[Holder]]] = {}
    for entry in pods:
        devices = held.setdefault(entry.resource_name, {})
        for device_id in entry.device_ids:
            devices.setdefault(device_id, set()).add((entry.namespace, entry.pod, entry.container))
    return held


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
        self._baseline = False
        # Lists answered so far, and the count when our Allocate gave each ID
        # out: a List that began after the hand-out and does not show the ID
        # means no app container holds it (see ``held``).
        self._lists = 0
        self._handed_at: dict[tuple[str, str], int] = {}
        # The last List answer taken (``holders_by_device``'s view of it), kept
        # while nothing but Lists changed what is held: see ``repeats``.
        self._last_listed: dict[str, dict[str, set[Holder]]] | None = None
        # resource -> called after our Allocate changed what it holds (handed_out, claim)
        self._watchers: dict[str, Callable[[], None]] = {}
        # Set once the first List has answered or failed: resources whose list
        # depends on what is held (gone units, unbounded sharing) register after it.
        self.settled = asyncio.Event()
        # Set by every hand-out: the poller, resting while nothing is held, wakes.
        self.handing_out = asyncio.Event()

    @property
    def has_baseline(self) -> bool:
        """Whether a List has answered since start (or since ``forget``)."""
        return self._baseline

    def holds_nothing(self) -> bool:
        """Whether a List answered and nobody holds anything: neither a container
        List showed (of any resource, ours or not) nor an ID our Allocate gave out."""
        return self._baseline and not any(
            holders for devices in self._holders.values() for holders in devices.values()
        )

    def in_use(self, resource: str) -> frozenset[str]:
        return frozenset(d for d, h in self._holders.get(resource, {}).items() if h)

    def watch(self, resource: str, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` whenever an Allocate changes what ``resource`` holds
        (None stops); a List's changes reach the poller's ``on_observed``."""
        if callback is None:
            self._watchers.pop(resource, None)
        else:
            self._watchers[resource] = callback

    def _changed(self, resource: str) -> None:
        callback = self._watchers.get(resource)
        if callback is not None:
            callback()

    def held(self, resource: str) -> frozenset[str]:
        """IDs some container holds as far as the device list is concerned.

        ``in_use`` keeps an ID our Allocate gave out until List shows it,
        however long that takes, because cleaning a device under a plain
        init container is worse than cleaning late. The list of an
        unbounded unit and the units kept after they vanish need a quicker
        answer: an ID that a whole List begun after the hand-out did not
        show (a pod that ended within one poll, an init container) is not
        held here, so the kubelet never sees more free IDs than configured.
        """
        devices = self._holders.get(resource, {})
        return frozenset(
            d
            for d, h in devices.items()
            if h - {HANDED_OUT}
            or self._handed_at.get((resource, d), self._lists) + 1 >= self._lists
        )

    def listed(self, resource: str) -> frozenset[str]:
        """IDs a List showed held (not just handed out by us), for observers."""
        devices = self._holders.get(resource, {})
        return frozenset(d for d, h in devices.items() if h - {HANDED_OUT})

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
        self._baseline = False
        self._last_listed = None

    def repeats(self, pods: Iterable[PodDevices]) -> bool:
        """Take a List answer if taking it would change nothing; whether it did.

        True when the answer holds what the last one held, nothing but Lists
        changed what is held since (no hand-out, claim or ``forget``), and no
        ID our Allocate gave out is still waiting for a whole List to miss it
        (``held``). Then ``observe`` would find no release and leave every
        resource's view as it is, so the caller can skip the work that costs
        per resource (an idle node's every poll). Costs what the answer holds,
        not what the daemon serves. False: call ``observe``.
        """
        if self._last_listed is None:
            return False
        if any(n + 1 >= self._lists for n in self._handed_at.values()):
            return False  # counting this List may drop such an ID from ``held``
        if holders_by_device(pods) != self._last_listed:
            return False
        self._lists += 1  # a List answered, as ``observe`` counts it
        return True

    def observe(self, pods: Iterable[PodDevices]) -> tuple[Release, ...]:
        """Take a List answer; return the units it shows released.

        The first answer is the baseline: what was in use before we looked is
        not ours to clean.
        """
        listed = holders_by_device(pods)
        self._last_listed = listed
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
        if not self._baseline:
            self._baseline = True
            return ()
        return released_units(previous, self.snapshot())

    def claim(self, resource: str, device_ids: Iterable[str]) -> tuple[Release, ...]:
        """The kubelet is giving these IDs out: whoever held them is done with them.

        Returns the units this releases (their cleanup must run first). Costs
        what the request names, not what the resource holds: each released
        unit is checked against its own replicas' holders only.
        """
        held = self._held_units(resource)  # before the pops below
        devices = self._holders.get(resource, {})
        freed: dict[str, list[str]] = {}
        for device_id in dict.fromkeys(device_ids):
            holders = devices.pop(device_id, set())
            if holders:
                freed.setdefault(unit_id_of(device_id), []).append(device_id)
            for holder in holders:
                if holder != HANDED_OUT:
                    self._stale.add((resource, device_id, holder))
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


# Seconds between Lists while nothing is held (``ReleasePoller``): a safety net only.
REST = 60.0


class ReleasePoller:
    """Polls PodResources List every ``interval`` and hands releases to ``dispatch``.

    ``on_observed`` runs after every answer that can change something (what
    is held shapes the device lists: ``DeviceState.set_in_use``); an answer
    that repeats the last one while nothing else changed costs the List and
    one comparison (``UsageTracker.repeats``), nothing per resource. Only
    polls while ``active()``. A
    failed List changes nothing: it is logged once per outage, and the next
    poll tries again. Nothing is released on a failed List.

    While a List shows nothing held on the node and our Allocate gave nothing
    out (``UsageTracker.holds_nothing``), the poller rests: only an Allocate
    can make something held (the kubelet hands a device out through us; after
    its restart it keeps the assignments it had, which were none), so it waits
    for the next hand-out, then polls ``interval`` later as usual. One List
    every ``rest`` seconds all the same, as a safety net. An idle node's poll
    is mostly gRPC's own threads waking (docs/performance.md).
    """

    def __init__(
        self,
        socket: Path,
        tracker: UsageTracker,
        dispatch: Callable[[tuple[Release, ...]], None],
        *,
        interval: float,
        active: Callable[[], bool] = lambda: True,
        on_observed: Callable[[], None] = lambda: None,
        list_pods: ListPods | None = None,
        timeout: float = 5.0,
        rest: float = REST,
        logger: logging.Logger = log,
    ) -> None:
        self._socket = socket
        self._tracker = tracker
        self._dispatch = dispatch
        self._interval = interval
        self._rest = max(rest, interval)
        self._active = active
        self._on_observed = on_observed
        # One channel for the poller's life (PodResourcesLister), unless told otherwise.
        self._own_lister: PodResourcesLister | None = None
        if list_pods is None:
            list_pods = self._own_lister = PodResourcesLister()
        self._list: ListPods = list_pods
        self._timeout = timeout
        self._log = logger
        self._failing = False

    async def run(self) -> None:
        """Poll until cancelled."""
        try:
            while True:
                self._tracker.handing_out.clear()
                await self.poll()
                if self._tracker.holds_nothing() and not self._failing:
                    await wait_event(self._tracker.handing_out, self._rest)
                await asyncio.sleep(self._interval)  # polling is the only way to learn
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
            pods = await self._list(self._socket, timeout=self._timeout)
        except KubeletError as exc:
            if not self._failing:
                self._log.warning(
                    "cannot read PodResources, no cleanup and no release of held IDs"
                    " until it answers: %s",
                    exc,
                )
            self._failing = True
            self._tracker.settled.set()  # nothing to wait for: register with what we know
            return False
        if self._failing:
            self._log.info("PodResources %s answers again", self._socket)
            self._failing = False
        if self._tracker.repeats(pods):
            return True  # nothing released, nothing any resource lists differently
        first = not self._tracker.has_baseline
        releases = self._tracker.observe(pods)
        if first:
            self._log.info("PodResources baseline: %s", _describe(self._tracker.snapshot()))
        if releases:
            self._dispatch(releases)
        self._tracker.settled.set()
        self._on_observed()
        return True


def _describe(in_use: Mapping[str, Set[str]]) -> str:
    if not in_use:
        return "no devices in use"
    return "; ".join(f"{r}: {len(ids)} in use" for r, ids in sorted(in_use.items()))


class Cleaner:
    """Runs one resource's cleanup hook, each unit in its own task.

    A unit is in the state's cleaning set (Unhealthy, refused by Allocate)
    from the moment its cleanup is due until it succeeds. A failed cleanup is
    retried with backoff (capped at a minute) for as long as the unit exists:
    a unit whose cleanup keeps failing stays out of service rather than go to
    the next pod dirty. Cleanup after a removal runs once (the device may be
    gone). ``stop`` lets running hooks finish, up to a timeout.
    """

    def __init__(
        self,
        state: DeviceState,
        definition: Callable[[], ResourceDefinition],
        context: ResourceContext,
    ) -> None:
        self._state = state
        self._definition = definition
        self._run_hook = context.run_hook
        self._node_name = context.node_name
        self._backoff = context.cleanup_backoff or (lambda: Backoff(initial=1.0, maximum=60.0))
        self._tasks = TaskSet(log)
        self._running: dict[str, asyncio.Task[None]] = {}  # for stop to wait on
        self._stopping = asyncio.Event()

    @property
    def resource(self) -> str:
        return self._definition().name

    def wanted(self) -> bool:
        return self._definition().hooks.cleanup is not None

    def busy(self, unit_id: str) -> bool:
        """Whether a cleanup of the unit is due or running."""
        return unit_id in self._state.cleaning

    def released(self, release: Release) -> None:
        """Start cleaning a released unit (retried until it succeeds)."""
        unit = self._state.units.get(release.unit_id)
        if not self.wanted() or self._stopping.is_set() or self.busy(release.unit_id):
            return  # a cleanup already running covers this release too
        if unit is None:
            # Gone from discovery: its removal cleanup ran when it vanished.
            log.debug("%s: released unit %s is gone", self.resource, release.unit_id)
            return
        self._state.set_cleaning(unit.id, cleaning=True)
        self._spawn(unit, release.device_ids, retry=True, wait_first=False)

    async def clean_now(self, release: Release) -> bool:
        """Clean a unit before an Allocate goes on (the kubelet already reuses it).

        On failure the unit stays in the cleaning set and is retried in the
        background; the caller's lookup then refuses it. False when there was
        nothing to run (no hook, the unit gone or already cleaning): then it
        returned at once, and nothing can have changed meanwhile.
        """
        unit = self._state.units.get(release.unit_id)
        if unit is None or not self.wanted() or self.busy(unit.id):
            return False
        self._state.set_cleaning(unit.id, cleaning=True)
        passed = False
        try:
            passed = await self._attempt(unit, release.device_ids, retry=True)
        finally:  # also when the Allocate is cancelled: the hook was stopped midway
            if passed or self._stopping.is_set():
                self._state.set_cleaning(unit.id, cleaning=False)
            else:
                self._spawn(unit, release.device_ids, retry=True, wait_first=True)
        return True

    def removed(self, unit: Unit, device_ids: Iterable[str]) -> None:
        """A unit in use vanished (or its resource is going): clean it once."""
        if not self.wanted() or self.busy(unit.id):
            return
        self._state.set_cleaning(unit.id, cleaning=True)  # in case it comes back meanwhile
        self._spawn(unit, tuple(sorted(device_ids)), retry=False, wait_first=False)

    async def stop(self, timeout: float = 5.0) -> tuple[str, ...]:  # noqa: ASYNC109
        """No more retries; running hooks get ``timeout`` to finish, then are cancelled."""
        self._stopping.set()
        running = [t for t in self._running.values() if not t.done()]
        self._running.clear()
        if running:
            await asyncio.wait(running, timeout=timeout)
        # A cancelled hook gets SIGTERM, then SIGKILL 2 s later (execution.py).
        return await self._tasks.stop(timeout=3.0)

    def drain_timeout(self, grace: float) -> float:
        """How long ``stop`` should wait so a hook can finish on its own timeout."""
        spec = self._definition().hooks.cleanup
        return max(grace, spec.timeout + 3.0) if spec is not None else grace

    def _spawn(
        self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool, wait_first: bool
    ) -> None:
        async def clean() -> None:
            try:
                await self._clean(unit, device_ids, retry=retry, wait_first=wait_first)
            finally:
                self._state.set_cleaning(unit.id, cleaning=False)

        self._running = {u: t for u, t in self._running.items() if not t.done()}
        self._running[unit.id] = self._tasks.spawn(
            f"{self.resource}/cleanup/{unit.id}",
            clean,
            log_fields={"resource": self.resource, "unit": unit.id},
            finishable=True,
        )

    async def _clean(
        self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool, wait_first: bool
    ) -> None:
        backoff = self._backoff()
        if wait_first and not await self._pause(unit, backoff):
            return
        while not await self._attempt(unit, device_ids, retry=retry):
            if not retry or not await self._pause(unit, backoff):
                return

    async def _attempt(self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool) -> bool:
        with logsetup.fields(resource=self.resource, unit=unit.id):
            return await self._attempt_in(unit, device_ids, retry=retry)

    async def _attempt_in(self, unit: Unit, device_ids: tuple[str, ...], *, retry: bool) -> bool:
        definition = self._definition()
        spec = definition.hooks.cleanup
        if spec is None:
            return True  # the hook was removed by a reload: nothing to run
        try:
            await self._run_hook(
                HookRun(
                    CLEANUP,
                    spec,
                    resource=definition.name,
                    units=(unit,),
                    device_ids=device_ids,
                    node_name=self._node_name,
                    logger=log,
                )
            )
        except HookError as exc:
            what = "out of service until its cleanup passes" if retry else "removed, not retried"
            log.error("%s: unit %s %s: %s", definition.name, unit.id, what, exc)
            return False
        return True

    async def _pause(self, unit: Unit, backoff: Backoff) -> bool:
        """Wait before the next attempt; False when it should not happen."""
        delay = backoff.next()
        log.info("%s: cleanup of unit %s again in %.1fs", self.resource, unit.id, delay)
        if await wait_event(self._stopping, delay):
            return False
        if unit.id not in self._state.units:
            log.warning("%s: unit %s is gone; its cleanup is not retried", self.resource, unit.id)
            return False
        return True
