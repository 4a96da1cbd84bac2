"""Keeps the node's ResourceSlices equal to what its resources serve (docs/dra.md, Slices).

One writer task gathers a burst of changes for ``coalesce`` seconds and writes only when
the pool differs from what the server holds (generation and server-filled fields aside).
A write raises the pool's generation by one and creates, replaces or deletes every slice to
match: the scheduler only uses a pool's newest generation. A failed write is retried with
backoff until it lands or ``close``; callers never see it.

The API server names each slice (``generateName``), so no name can be squatted: ours are
known by their label (``slices.SLICE_LABEL``) and owner (the Node, when it can be read). A
slice with our label but another owner is a stranger's: left alone, said once.

At start the slices a previous instance left are adopted: the first write keeps those that
match and deletes the rest (also a second slice of one key and the unlabelled slices of
versions that named their own). It waits until every resource announced with ``expect``
has published or withdrawn, at most ``adopt_grace`` s, so a restart neither deletes the
slices of a slower first scan nor writes the pool once per resource. A watch of the node's
slices (``slicewatch.py``) notices what others change or delete (the kubelet deletes a
node's slices when it starts): the pool is then compared and rewritten if it differs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from typing import Any

from genericdp.aio import Backoff, TaskSet, wait_event
from genericdp.discovery.model import Unit
from genericdp.kube.listwatch import ListWatch, describe
from genericdp.kubeletplugin import slices
from genericdp.kubeletplugin.slicestore import SliceStore
from genericdp.kubeletplugin.slicewatch import SliceWatch

log = logging.getLogger(__name__)

COALESCE = 0.05  # seconds a burst of changes is gathered before one write
# Seconds between two writes of the pool at least: a device flapping 90 times a second is
# four rewrites a second of its latest state; a change after a quiet spell waits COALESCE.
MIN_WRITE_GAP = 0.25
# The longest the first write waits for an expected resource's first publish: a
# resource whose first scan fails (retried with backoff) does not hold the others back.
ADOPT_GRACE = 5.0
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
# A server that ends every watch at once is asked again at most this often.
WATCH_BACKOFF_FIRST, WATCH_BACKOFF_MAX = 0.5, 30.0
# Every node loses a restarting API server at once: retries scaled by a random factor in
# [0.5, 1.5] come back spread over seconds (docs/contributing/performance.md, "A fleet").
BACKOFF_JITTER = 0.5
RESYNC = 600.0  # seconds between lists of the slices (jittered), whatever the watch says
FAILURE_LOG_EVERY = 30.0  # seconds between warnings while the API server stays unreachable
CLOSE_FLUSH = 2.0  # seconds close waits for a pending write
# Keys of held slices that are ours but not of the pool: deleted at the next write.
_UNLABELLED = "unlabelled/"  # a slice of a version that named its own slices
_EXTRA = "extra/"  # a second slice of one key (a create answered too late, then retried)


class SlicePublisher:
    """The ResourceSlices of one node's pool, written by one task."""

    def __init__(
        self,
        store: SliceStore,
        *,
        coalesce: float = COALESCE,
        adopt_grace: float = ADOPT_GRACE,
        resync: float = RESYNC,
    ) -> None:
        self._store = store
        self.node = store.node
        self.driver = store.driver
        self._coalesce = coalesce
        self._last_sync = -MIN_WRITE_GAP  # time.monotonic() at the end of the last write
        self._adopt_grace = adopt_grace
        self._desired: dict[str, list[dict[str, Any]]] = {}
        self._held: dict[str, dict[str, Any]] | None = None  # key -> what the server holds
        self._foreign: dict[str, dict[str, Any]] = {}  # name -> a slice of the node not ours
        self._strangers: set[str] = set()  # names of slices with our label, said once
        self._owner: dict[str, str] | None = None  # the ownerReference to our Node, if read
        self._generation = 0
        self._sharing = True  # until the API server drops allowMultipleAllocations
        self.taints_dropped = False  # the server was seen dropping them (a metric)
        self._untainted: dict[str, int] = {}  # resource -> tainted devices left out
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks = TaskSet(log)
        self._started = False
        self._started_at = 0.0
        self._synced = False  # the first comparison or write is done
        self._expected: set[str] = set()  # what the first write waits for (``expect``)
        self._answered: set[str] = set()  # resources that published or withdrew
        self._all_in = asyncio.Event()  # every expected resource answered
        self._listed = asyncio.Event()  # the first list is done: adopted, the watch may start
        self._list_version = ""  # the resourceVersion of the writer's last list
        self._stales = 0  # changes by others seen (a list under way meanwhile is redone)
        self._writing = False  # watch events meanwhile wait for its answers (slicewatch.py)
        self._followed = SliceWatch(
            store, held=self._by_name, stale=self._stale, writing=lambda: self._writing
        )
        backoff = Backoff(
            initial=WATCH_BACKOFF_FIRST, maximum=WATCH_BACKOFF_MAX, jitter=BACKOFF_JITTER
        )
        what = f"the ResourceSlices of node {self.node}"
        self._watch = ListWatch(what, self._followed, backoff, resync=resync)

    async def start(self) -> None:
        """Start the writer; returns at once (an unreachable API server delays only writes)."""
        if self._started:
            return
        self._started = True
        self._started_at = time.monotonic()
        # Both loops handle the API server's failures; a bug of ours is logged and restarted.
        for name, loop in ((self.node, self._run), (f"{self.node}/watch", self._follow)):
            restart = Backoff(initial=BACKOFF_FIRST, maximum=BACKOFF_MAX)
            self._tasks.spawn(f"dra/slices/{name}", loop, backoff=restart)
        self._changed()

    def expect(self, resource: str) -> None:
        """The first write waits for ``resource`` (at most ``adopt_grace``); no effect after."""
        if self._listed.is_set() or resource in self._answered:
            return
        self._expected.add(resource)
        self._all_in.clear()

    def _answer(self, resource: str) -> None:
        self._answered.add(resource)
        if self._expected <= self._answered:
            self._all_in.set()

    async def publish(
        self,
        resource: str,
        units: Sequence[Unit],
        unhealthy: AbstractSet[str],
        *,
        options: slices.DeviceOptions = slices.DEFAULT_OPTIONS,
    ) -> None:
        """Raises ``slices.SliceError`` when the resource cannot be published at all."""
        self._answer(resource)  # even one that cannot be published: its old slices go
        if not self._sharing:
            options = replace(options, sharing=False)
        found = slices.devices(resource, units, unhealthy, driver=self.driver, options=options)
        if self.taints_dropped:
            found = self._leave_tainted_out(resource, found)
        if self._desired.get(resource) == found:
            return
        self._desired[resource] = found
        self._changed()

    async def withdraw(self, resource: str) -> None:
        self._answer(resource)
        self._untainted.pop(resource, None)
        if self._desired.pop(resource, None) is not None:
            self._changed()

    async def flush(self, timeout: float = CLOSE_FLUSH) -> bool:  # noqa: ASYNC109 - a bounded wait
        """False when ``timeout`` passed before what was published was written."""
        return await wait_event(self._idle, timeout)

    async def close(self) -> None:
        """Write what is pending (for at most ``CLOSE_FLUSH`` s) and stop; the slices stay."""
        if not self._started:
            return
        if not await self.flush():
            log.warning("stopping with ResourceSlice changes of node %s unwritten", self.node)
        await self._tasks.stop()
        self._started = False

    @property
    def watch_restarts(self) -> dict[str, int]:
        """Watches opened again, by why (``genericdp_dra_slice_watch_restarts_total``)."""
        return dict(self._watch.restarts)

    @property
    def untainted(self) -> int:
        """Unhealthy devices left out of the slices because the server drops taints."""
        return sum(self._untainted.values())

    @property
    def strangers(self) -> int:
        """Slices of this node and driver with our label and another owner (left alone)."""
        return sum(1 for name in self._foreign if name in self._strangers)

    def _changed(self) -> None:
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        backoff = Backoff(initial=BACKOFF_FIRST, maximum=BACKOFF_MAX, jitter=BACKOFF_JITTER)
        failing_since: float | None = None
        last_warning = 0.0
        while True:
            await self._wake.wait()
            self._idle.clear()
            if self._listed.is_set():
                await asyncio.sleep(self._coalesce)
                # Changes keep gathering (in _desired) while the last write is too recent.
                await asyncio.sleep(self._last_sync + MIN_WRITE_GAP - time.monotonic())
            else:
                await self._takeover_ready()
            self._wake.clear()
            try:
                await self._sync()
                self._last_sync = time.monotonic()
            except Exception as err:  # noqa: BLE001 -- the daemon keeps serving; retried below
                self._held = None  # list again before the next try
                delay = backoff.next()
                now = time.monotonic()
                if failing_since is None or now - last_warning >= FAILURE_LOG_EVERY:
                    log.warning(
                        "could not write the ResourceSlices of node %s (retrying in %.1fs): %s",
                        self.node,
                        delay,
                        describe(err),
                    )
                    last_warning = now
                failing_since = failing_since or now
                self._wake.set()
                await asyncio.sleep(delay)
                continue
            if failing_since is not None:
                log.info(
                    "ResourceSlices of node %s written again after %.1fs of failures",
                    self.node,
                    time.monotonic() - failing_since,
                )
            failing_since = None
            backoff.reset()
            if not self._wake.is_set():
                self._idle.set()

    async def _takeover_ready(self) -> None:
        left = self._started_at + self._adopt_grace - time.monotonic()
        if not self._all_in.is_set() and left > 0:
            await wait_event(self._all_in, left)
        late = sorted(self._expected - self._answered)
        if late:
            log.info(
                "writing the ResourceSlices of node %s without waiting longer for %s"
                " (no first scan within %.1fs of start)",
                self.node,
                ", ".join(late),
                self._adopt_grace,
            )

    async def _follow(self) -> None:
        """Watch from the first list's resourceVersion: one list at start, not two."""
        await self._listed.wait()
        await self._watch.run(self._list_version or None)

    def _stale(self) -> None:
        self._stales += 1
        self._held = None
        self._changed()

    async def _list(self) -> dict[str, dict[str, Any]]:
        """Our slices by key, from a list no change by others overlapped; the owner is read
        afresh each time (a recreated Node has a new UID)."""
        while True:
            stales = self._stales
            listing = await self._store.list()
            owner = await self._store.owner()
            if stales == self._stales:
                self._list_version = listing.version
                self._owner = owner
                return self._ours(listing.slices)

    def _ours(self, found: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Sort the node's slices of the driver into ours (by key) and others' (by name)."""
        ours: dict[str, dict[str, Any]] = {}
        self._foreign = {}
        uid = self._owner["uid"] if self._owner is not None else None
        for name in sorted(found):
            obj = found[name]
            metadata = obj.get("metadata") or {}
            key = (metadata.get("labels") or {}).get(slices.SLICE_LABEL)
            owners = {str(o.get("uid")) for o in metadata.get("ownerReferences") or []}
            if key is None and not owners:
                ours[f"{_UNLABELLED}{name}"] = obj
            elif key is not None and (not owners or uid in owners):
                ours[f"{_EXTRA}{name}" if key in ours else str(key)] = obj
            else:
                self._foreign[name] = obj
                if key is not None and name not in self._strangers:
                    self._strangers.add(name)
                    log.warning(
                        "ResourceSlice %s of node %s carries genericdp's label %s but another"
                        " owner: not ours, left alone (delete it if it should not be there)",
                        name,
                        self.node,
                        slices.SLICE_LABEL,
                    )
        return ours

    def _by_name(self) -> dict[str, dict[str, Any]] | None:
        """The node's slices of the driver by name, ours and others'; None while listing."""
        if self._held is None:
            return None
        return {**self._foreign, **{_name(obj): obj for obj in self._held.values()}}

    async def _sync(self) -> None:
        if self._held is None:
            self._held = await self._list()
            if not self._listed.is_set() and self._held:
                log.info(
                    "adopting %d ResourceSlice(s) of node %s: %s",
                    len(self._held),
                    self.node,
                    ", ".join(sorted(_name(obj) for obj in self._held.values())),
                )
            self._listed.set()
        held = self._held
        wanted = self._wanted(0)
        if _same(wanted, held):
            self._first_sync(0)
            return
        generations = [int(obj["spec"]["pool"].get("generation", 0)) for obj in held.values()]
        self._generation = max([self._generation, *generations]) + 1
        wanted = self._wanted(self._generation)
        gone = sorted(set(held) - set(wanted))
        # All slices at once: the pool is incomplete until the last one is written.
        self._writing = True
        try:
            outcomes = await asyncio.gather(
                *(self._put(obj, held.get(key)) for key, obj in wanted.items()),
                *(self._store.delete(_name(held[key])) for key in gone),
                return_exceptions=True,
            )
        finally:
            self._writing = False
        try:
            for key, written in zip([*wanted, *gone], outcomes, strict=True):
                if isinstance(written, BaseException):
                    raise written
                if written is None:
                    held.pop(key, None)
                else:
                    held[key] = written
                    self._check_dropped(wanted[key], written)
        finally:
            self._followed.written()  # our own writes among the events held back change nothing
        log.debug(
            "ResourceSlices of node %s at generation %d: %s",
            self.node,
            self._generation,
            ", ".join(sorted(_name(obj) for obj in held.values())) or "none",
        )
        self._first_sync(len(outcomes))

    def _check_dropped(self, wanted: dict[str, Any], written: dict[str, Any]) -> None:
        """A server dropping a gated field: shared devices become exclusive (docs/dra.md,
        Sharing); tainted ones are left out, an unhealthy device must not look allocatable."""
        wanted, written = wanted["spec"], written["spec"]
        if self._sharing and slices.dropped("allowMultipleAllocations", wanted, written):
            self._sharing = False
            self._desired = {r: slices.unshared(found) for r, found in self._desired.items()}
            log.warning(
                "the API server dropped allowMultipleAllocations from the ResourceSlices of node"
                " %s (its DRAConsumableCapacity feature gate is off): devices of resources with"
                " count are published for one claim at a time, pods share one only by sharing a"
                " claim",
                self.node,
            )
        if not self.taints_dropped and slices.dropped("taints", wanted, written):
            self.taints_dropped = True
            self._desired = {r: self._leave_tainted_out(r, f) for r, f in self._desired.items()}
            log.warning(
                "the API server dropped the taints from the ResourceSlices of node %s (its"
                " DRADeviceTaints feature gate is off): unhealthy devices, and unplugged ones"
                " still held, are left out of the slices until they are healthy again",
                self.node,
            )
            self._changed()  # the devices just written untainted go at once

    def _leave_tainted_out(
        self, resource: str, found: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        kept = [entry for entry in found if not entry.get("taints")]
        self._untainted[resource] = len(found) - len(kept)
        return kept

    def _first_sync(self, writes: int) -> None:
        if self._synced:
            return
        self._synced = True
        devices = sum(len(found) for found in self._desired.values())
        log.info(
            "ResourceSlices of node %s up to date %.3fs after start: %d device(s) of %d"
            " resource(s), %d slice(s) written",
            self.node,
            time.monotonic() - self._started_at,
            devices,
            len(self._desired),
            writes,
        )

    def _wanted(self, generation: int) -> dict[str, dict[str, Any]]:
        pool = slices.pool_slices(
            self._desired, node=self.node, driver=self.driver, generation=generation
        )
        if self._owner is not None:
            for obj in pool.values():
                obj["metadata"]["ownerReferences"] = [dict(self._owner)]
        return pool

    async def _put(self, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        if old is None:
            return await self._store.create(obj)  # named by the API server
        obj["metadata"]["name"] = _name(old)
        obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return await self._store.replace(obj)


def _same(wanted: dict[str, dict[str, Any]], held: dict[str, dict[str, Any]]) -> bool:
    """The server holds ``wanted`` (generation aside), all of one generation, same owners."""
    if set(wanted) != set(held):
        return False
    if len({obj["spec"]["pool"].get("generation") for obj in held.values()}) > 1:
        return False
    return all(
        slices.comparable(wanted[key]["spec"]) == slices.comparable(held[key]["spec"])
        and _owners(wanted[key]) == _owners(held[key])
        for key in wanted
    )


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _owners(obj: Mapping[str, Any]) -> set[str]:
    return {str(o.get("uid")) for o in obj["metadata"].get("ownerReferences") or []}
