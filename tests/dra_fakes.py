"""Shared pieces of the DRA backend tests: definitions, units, claims, a hook recorder."""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genericdp.config.model import (
    AllocateSpec,
    Exec,
    GlobMatcher,
    HealthCheck,
    Hooks,
    MountTemplate,
    ResourceDefinition,
    frozen_map,
)
from genericdp.config.templates import compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra.checkpoint import Checkpoint
from genericdp.dra.embedded import EmbeddedClaims
from genericdp.dra.inventory import Inventory
from genericdp.dra.prepare import Preparer
from genericdp.errors import HookError
from genericdp.hooks import HookRun
from genericdp.kube.client import ApiRequestError
from genericdp.kube.listwatch import ExpiredError
from genericdp.kubeletplugin.claims import AllocatedDevice, Allocation, ClaimRef
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.slicestore import Listing

NODE = "node-a"
DRIVER = "genericdp.io"
SERIAL = "example.com/serial"
HOOK = Exec(("/bin/true",), 5.0)


class MemoryClaims(EmbeddedClaims):
    """``simulate``'s claims in memory, given at once or by ``allocate``, which may name
    the claim's pod claim; a claim never allocated is gone, as it is for the API server.
    ``calls``: the allocations read."""

    def __init__(self, claims: Mapping[ClaimRef, Iterable[AllocatedDevice]] | None = None) -> None:
        super().__init__()
        self.calls = 0
        for ref, devices in (claims or {}).items():
            self.allocate(ref, devices)

    def allocate(
        self, claim: ClaimRef, devices: Iterable[AllocatedDevice], *, pod_claim: str = ""
    ) -> None:
        """``pod_claim``: the claim's ``resource.kubernetes.io/pod-claim-name``."""
        self._claims[claim.uid] = (claim, Allocation(tuple(devices), pod_claim))

    async def allocation(self, claim: ClaimRef) -> Allocation:
        self.calls += 1
        return await super().allocation(claim)


def unit(n: int) -> Unit:
    return Unit(f"A{n}", (DeviceNode(f"/dev/ttyUSB{n}", f"/dev/serial/by-id/usb-A{n}"),))


def definition(
    name: str = SERIAL,
    *,
    hooks: Hooks | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[MountTemplate] = (),
    health: HealthCheck | None = None,
) -> ResourceDefinition:
    allocate = AllocateSpec(frozen_map(env), tuple(mounts))
    return ResourceDefinition(
        name=name,
        match=(GlobMatcher("/dev/ttyUSB*"),),
        hooks=hooks or Hooks(),
        allocate=allocate,
        health=health,
        templates=compile_templates(allocate),
    )


def claim(n: int = 1) -> ClaimRef:
    return ClaimRef("default", f"claim-{n}", f"0000000{n}-aaaa-bbbb-cccc-dddddddddddd")


def allocated(resource: str, *units: Unit, pool: str = NODE) -> list[AllocatedDevice]:
    return [AllocatedDevice("req", pool, device_name(resource, u.id)) for u in units]


@dataclass
class RecordedHooks:
    """A HookRunner recording (hook, resource, units, device IDs); fails the hooks in ``fail``."""

    runs: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)

    async def __call__(self, hook: HookRun) -> object:
        self.runs.append(
            (hook.name, hook.resource, tuple(u.id for u in hook.units), tuple(hook.device_ids))
        )
        if hook.name in self.fail:
            raise HookError(f"{hook.name} hook failed on purpose")
        return None

    def names(self) -> list[str]:
        return [run[0] for run in self.runs]


@dataclass
class Setup:
    inventory: Inventory
    claims: MemoryClaims
    checkpoint: Checkpoint
    hooks: RecordedHooks
    preparer: Preparer
    cdi_dir: Path


def setup(
    base: Path,
    definitions: Sequence[tuple[ResourceDefinition, Sequence[Unit]]],
    *,
    hooks: RecordedHooks | None = None,
) -> Setup:
    inventory = Inventory(NODE)
    for d, units in definitions:
        inventory.set_resource(d, units)
    claims = MemoryClaims()
    checkpoint = Checkpoint(base / "plugin" / "checkpoint.json")
    checkpoint.load()
    hooks = hooks or RecordedHooks()
    cdi_dir = base / "cdi"
    preparer = Preparer(
        driver=DRIVER,
        inventory=inventory,
        claims=claims,
        checkpoint=checkpoint,
        cdi_dir=cdi_dir,
        run_hook=hooks,
        node_name=NODE,
    )
    preparer.configured = frozenset(d.name for d, _ in definitions)
    return Setup(inventory, claims, checkpoint, hooks, preparer, cdi_dir)


class MemorySlices:
    """A ``SliceStore`` in memory that answers as the API server does for one node's slices.

    Every write (deletes too) gets a new ``resourceVersion``, one up; creating a
    name that exists or replacing at a stale version is a 409, replacing a
    missing slice a 404; a list carries the last version, and a watch from a
    version reports every change after it, by the publisher or by
    ``someone_*``, then each as it happens, until ``end_watches`` or its
    ``seconds`` are over. A watch from
    a version before the last ``compact`` is ``ExpiredError`` (410 Gone).
    ``failures`` are raised by the next calls, one each, in order. ``changed``
    is notified on every change.
    """

    def __init__(self, node: str = NODE, driver: str = DRIVER) -> None:
        self.node = node
        self.driver = driver
        self.objects: dict[str, dict[str, Any]] = {}
        self.failures: list[Exception] = []
        # The ownerReference to the node's Node (None: the Node cannot be read).
        self.node_owner: dict[str, str] | None = {
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "uid": f"uid-of-{node}",
        }
        self.writes = 0  # creates, replaces and deletes that landed
        self.lists = 0
        self.watches = 0  # watch requests
        self.changed = asyncio.Condition()
        self._versions = itertools.count(1)
        self._names = itertools.count()
        self._version = 0  # the last one given
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._compacted = 0
        self._watches: list[asyncio.Queue[tuple[str, dict[str, Any]] | None]] = []

    # -- the SliceStore ------------------------------------------------------------

    async def list(self) -> Listing:
        self._fail()
        self.lists += 1
        return Listing(copy.deepcopy(self.objects), str(self._version))

    async def watch(self, version: str, seconds: int) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        self._fail()
        self.watches += 1
        if int(version) < self._compacted:
            raise ExpiredError(f"watching from {version}: the API server answered 410: too old")
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        for at, kind, obj in self._events:
            if at > int(version):
                queue.put_nowait((kind, copy.deepcopy(obj)))
        self._watches.append(queue)
        ends = asyncio.get_running_loop().time() + seconds  # the server's end of a watch
        try:
            while True:
                left = ends - asyncio.get_running_loop().time()
                try:
                    async with asyncio.timeout(left):
                        event = await queue.get()
                except TimeoutError:
                    return
                if event is None:
                    return
                yield event
        finally:
            self._watches.remove(queue)

    async def owner(self) -> dict[str, str] | None:
        self._fail()
        return self.node_owner

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._fail()
        obj = copy.deepcopy(obj)
        if "name" not in obj["metadata"]:  # generateName: five characters more
            obj["metadata"]["name"] = f"{obj['metadata']['generateName']}{next(self._names):05d}"
        name = obj["metadata"]["name"]
        if name in self.objects:
            raise ApiRequestError(f"creating ResourceSlice {name}", 409, "already exists")
        return await self._store("ADDED", obj)

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._fail()
        name = obj["metadata"]["name"]
        held = self.objects.get(name)
        what = f"replacing ResourceSlice {name}"
        if held is None:
            raise ApiRequestError(what, 404, "not found")
        if obj["metadata"].get("resourceVersion") != held["metadata"]["resourceVersion"]:
            raise ApiRequestError(what, 409, "the object has been modified")
        return await self._store("MODIFIED", obj)

    async def delete(self, name: str) -> None:
        self._fail()
        if name in self.objects:
            self.writes += 1
            await self._notify("DELETED", self._bump(self.objects.pop(name)))

    # -- what tests do and look at --------------------------------------------------

    async def someone_deletes(self, name: str, *, quietly: bool = False) -> None:
        """Another client deletes slice ``name`` (``quietly``: no watch ever reports it,
        as if the server lost the event)."""
        gone = self._bump(self.objects.pop(name))
        if not quietly:
            await self._notify("DELETED", gone)

    async def someone_changes(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Another client edits slice ``name`` (a new resourceVersion, a watch event)."""
        obj = copy.deepcopy(self.objects[name])
        change(obj)
        await self._store("MODIFIED", obj, ours=False)

    def end_watches(self) -> None:
        """The API server closes every watch (a restart, a timeout)."""
        for queue in self._watches:
            queue.put_nowait(None)

    def compact(self) -> None:
        """The server forgets every change so far: a watch from before now is 410 Gone."""
        self._compacted = self._version
        self._events.clear()

    async def until(
        self,
        check: Callable[[dict[str, dict[str, Any]]], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 -- a bound on a test wait
    ) -> None:
        """Wait until ``check(objects)`` holds (checked at every change); fail after ``timeout``."""
        try:
            async with asyncio.timeout(timeout), self.changed:
                await self.changed.wait_for(lambda: check(self.objects))
        except TimeoutError:
            raise AssertionError(f"still not true after {timeout}s: {self.objects}") from None

    def devices(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for obj in self.objects.values() for d in obj["spec"]["devices"]}

    def generations(self) -> set[int]:
        return {int(obj["spec"]["pool"]["generation"]) for obj in self.objects.values()}

    # -- inside -----------------------------------------------------------------------

    def _fail(self) -> None:
        if self.failures:
            raise self.failures.pop(0)

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._version = next(self._versions)
        obj["metadata"]["resourceVersion"] = str(self._version)
        return obj

    async def _store(self, kind: str, obj: dict[str, Any], *, ours: bool = True) -> dict[str, Any]:
        stored = self._bump(copy.deepcopy(obj))
        self.objects[stored["metadata"]["name"]] = stored
        if ours:
            self.writes += 1
        await self._notify(kind, stored)
        return copy.deepcopy(stored)

    async def _notify(self, kind: str, obj: dict[str, Any]) -> None:
        self._events.append((self._version, kind, copy.deepcopy(obj)))
        for queue in self._watches:
            queue.put_nowait((kind, copy.deepcopy(obj)))
        async with self.changed:
            self.changed.notify_all()
