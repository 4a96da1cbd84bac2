"""NodePrepareResources and NodeUnprepareResources, on our types.

The kubelet retries, and calls again after its own restart: a claim already prepared
(``checkpoint.py``) gets the same answer, nothing runs again.

Unprepare runs the ``cleanup`` hook each unit was handed out under, removes the claim's CDI
spec and metadata and forgets it. A claim we never prepared is a success: that is what the
kubelet needs to move on. When the definition has left the config the unit is recorded as
uncleaned instead (``uncleaned.py``) and prepare refuses it until an admin releases it.

Shared devices (``count``): ``init`` and ``preStart`` run at each claim's prepare and
``cleanup`` at the unprepare of the unit's last claim. Claims sharing a unit take turns (a
lock per unit), so ``init`` never runs during that unit's ``cleanup`` and two claims
unprepared at once clean their unit once.

A problem with one claim is that claim's error, never the whole call's, and never a crash: the
claim comes from the API server and its names from whoever wrote the pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from weakref import WeakValueDictionary

from genericdp.allocation.cdi import (
    claim_device_id,
    claim_spec_name,
    remove_claim_spec,
    write_claim_spec,
)
from genericdp.allocation.plan import Plan, plan_allocation
from genericdp.allocation.render import rendered_soon
from genericdp.atomicfile import reason
from genericdp.config.model import Exec
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra import metadata
from genericdp.dra.cdispec import claim_spec, undelivered
from genericdp.dra.checkpoint import PREPARED, PREPARING, Checkpoint, PreparedClaim, PreparedDevice
from genericdp.dra.inventory import Inventory, Located
from genericdp.dra.turns import TurnError, Turns
from genericdp.errors import GenericdpError, clip, cut, first_of
from genericdp.hooks import CLEANUP, INIT, PRE_START, HookRun, HookRunner
from genericdp.kubeletplugin.claims import (
    AllocatedDevice,
    ClaimError,
    ClaimRef,
    ClaimSource,
    unique_claims,
)
from genericdp.runtime.recorder import NO_METRICS, Recorder, allocation_result
from genericdp.runtime.uncleaned import Uncleaned, file_name

log = logging.getLogger(__name__)

# A ResourceClaim's allocation holds at most 32 results (AllocationResultsMaxSize
# in resource.k8s.io/v1); far more means the data is not what the API server keeps.
MAX_DEVICES_PER_CLAIM = 128
# A claim's error ends up in the pod's events (and the kubelet's log): the API
# server's or a hook's words are cut to this.
MAX_ERROR_CHARS = 2048
CONCURRENCY = 8  # claims whose hooks and files are under way at once


_Step = Callable[[ClaimRef], Awaitable["ClaimResult"]]
_Record = Callable[[str, str, float], None]  # driver, result, seconds


@dataclass(frozen=True)
class ClaimResult:
    """One claim's entry in the answer: its devices, or why it failed."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Preparer:
    """Prepare and unprepare claims of one driver on one node."""

    def __init__(
        self,
        *,
        driver: str,
        inventory: Inventory,
        claims: ClaimSource,
        checkpoint: Checkpoint,
        cdi_dir: Path,
        run_hook: HookRunner,
        node_name: str = "",
        recorder: Recorder = NO_METRICS,
        turns: Turns | None = None,
    ) -> None:
        self.driver = driver
        self._turns = turns  # None: the only instance on the node (tests)
        self._inventory = inventory
        self._claims = claims
        self._checkpoint = checkpoint
        self._cdi_dir = cdi_dir
        self._run_hook = run_hook
        self._node_name = node_name
        self._recorder = recorder
        self._slots = asyncio.Semaphore(CONCURRENCY)
        # Per claim UID, while a call for it is under way (a step holds its lock).
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._unit_locks: dict[tuple[str, str], asyncio.Lock] = {}  # per (resource, unit)
        # Called after each change of the recorded claims (what they hold: ``DraUsage``).
        self.on_change: Callable[[], None] = lambda: None
        # The names of every resource of the config applied (served here or not); None
        # until the first is applied: unprepare waits for it (the kubelet retries).
        self.configured: frozenset[str] | None = None

    # -- batches -----------------------------------------------------------------

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimResult]:
        """Prepare every claim; one entry per distinct claim UID."""
        started = time.monotonic()
        unique = unique_claims(claims)
        results = await self._batch(self._prepare, unique, self._recorder.claim_prepare)
        failed = sum(1 for r in results if r.error)
        took = time.monotonic() - started
        log.info(
            "NodePrepareResources: %d claim(s), %d failed, in %.3fs", len(unique), failed, took
        )
        return {c.uid: r for c, r in zip(unique, results, strict=True)}

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare every claim; one entry per distinct claim UID, its error or ""."""
        unique = unique_claims(claims)
        results = await self._batch(self._unprepare, unique, self._recorder.claim_unprepare)
        return {c.uid: r.error for c, r in zip(unique, results, strict=True)}

    async def _batch(
        self, step: _Step, claims: Sequence[ClaimRef], record: _Record
    ) -> list[ClaimResult]:
        """Every claim's step, in one turn of the node's instances (``turns.py``)."""
        try:
            async with self._turns.turn() if self._turns else nullcontext():
                return await asyncio.gather(*(self._guarded(step, c, record) for c in claims))
        except TurnError as exc:
            for _ in claims:
                record(self.driver, "checkpoint_failed", 0.0)
            return [ClaimResult(error=f"claim {clip(c.named, 200)}: {exc}") for c in claims]

    async def _guarded(self, step: _Step, claim: ClaimRef, record: _Record) -> ClaimResult:
        started = time.monotonic()
        result, outcome = await self._attempt(step, claim)
        record(self.driver, outcome, time.monotonic() - started)
        return replace(result, error=cut(result.error, MAX_ERROR_CHARS))

    async def _attempt(self, step: _Step, claim: ClaimRef) -> tuple[ClaimResult, str]:
        """The claim's entry, and its ``result`` label (``CLAIM_RESULTS``)."""
        where = f"claim {clip(claim.named, 200)}"
        invalid = claim.problem()
        if invalid:
            return ClaimResult(error=f"{where}: {invalid}"), "invalid"
        lock = self._locks.setdefault(claim.uid, asyncio.Lock())
        try:
            async with lock:  # one step at a time per claim: the kubelet retries
                return await step(claim), "ok"
        except ClaimError as exc:
            return ClaimResult(error=f"{where}: {exc}"), "claim_failed"
        except GenericdpError as exc:  # a hook, a template, the CDI spec
            return ClaimResult(error=f"{where}: {exc}"), allocation_result(exc)
        except OSError as exc:
            error = f"cannot write the DRA checkpoint {self._checkpoint.path}: {reason(exc)}"
            return ClaimResult(error=f"{where}: {error}"), "checkpoint_failed"
        except Exception as exc:  # a bug of ours: this claim fails, the others go on
            log.exception("%s failed", where)
            return ClaimResult(error=f"{where}: internal error: {clip(str(exc), 200)}"), "error"

    # -- one claim ---------------------------------------------------------------

    async def _prepare(self, claim: ClaimRef) -> ClaimResult:
        known = self._checkpoint.get(claim.uid)
        if known is not None and known.claim != claim:  # the same UID, another name
            raise ClaimError(f"its UID is that of claim {known.claim.named}, prepared here already")
        if known is not None and known.state == PREPARED:
            return ClaimResult(known.devices)  # no read, no slot: answered at once
        # The read is outside the slots (it has a deadline of its own): slow API
        # server reads never hold back claims that need none.
        allocation = await self._claims.allocation(claim)
        allocated = allocation.devices
        if not allocated:
            raise ClaimError(f"its allocation holds no device of driver {self.driver}")
        if len(allocated) > MAX_DEVICES_PER_CLAIM:
            raise ClaimError(
                f"its allocation lists {len(allocated)} devices for driver {self.driver},"
                f" more than the {MAX_DEVICES_PER_CLAIM} a claim can hold"
            )
        named = metadata.problem(
            claim.namespace, claim.name, (a.request for a in allocated), allocation.pod_claim
        )
        if named:
            raise ClaimError(f"its device metadata cannot be written: {named}")
        found = [(a, self._locate(a)) for a in allocated]
        async with self._slots:
            return await self._commit(claim, found, allocation.pod_claim)

    async def _commit(
        self, claim: ClaimRef, found: Sequence[tuple[AllocatedDevice, Located]], pod_claim: str
    ) -> ClaimResult:
        """Record, run the hooks, write the metadata and the spec: what a slot bounds."""
        plans, _ = await rendered_soon(lambda slice_seconds: self._plan(found, slice_seconds))
        devices = self._devices(claim, found, plans)
        async with self._units_locked((d.resource, d.unit) for d in devices):
            preparing = PreparedClaim(claim, PREPARING, devices, pod_claim=pod_claim)
            await self._checkpoint.put(preparing)
            self.on_change()
            for plan in plans:
                for name in (INIT, PRE_START):
                    if (run := plan.hook(name, logger=log)) is not None:
                        await self._run_hook(run)
                if warning := undelivered(plan):
                    log.warning("claim %s: %s", claim.named, warning)
            plugin_dir = self._checkpoint.path.parent
            await asyncio.to_thread(metadata.write, plugin_dir, self.driver, preparing)
            mounts = metadata.cdi_devices(plugin_dir, self.driver, preparing)
            spec = claim_spec(self.driver, claim.uid, plans, mounts)
            await asyncio.to_thread(write_claim_spec, self._cdi_dir, self.driver, claim.uid, spec)
            name = claim_spec_name(self.driver, claim.uid)
            await self._checkpoint.put(replace(preparing, state=PREPARED, spec=name))
        names = first_of([d.device for d in devices], 5, empty="no devices")
        log.info("prepared claim %s (UID %s): %s", claim.named, claim.uid, names)
        return ClaimResult(devices)

    def _devices(
        self,
        claim: ClaimRef,
        found: Sequence[tuple[AllocatedDevice, Located]],
        plans: Sequence[Plan],
    ) -> tuple[PreparedDevice, ...]:
        """The claim's devices as the checkpoint records them and the kubelet is told."""
        paths = {
            device: tuple(n.container_path for n in nodes)
            for plan in plans
            for device, nodes in zip(plan.device_ids, plan.nodes, strict=True)
        }
        devices = []
        requests: set[str] = set()
        for alloc, located in found:
            cdi_ids = [claim_device_id(self.driver, claim.uid, alloc.device)]
            # A request's metadata mount goes with its first device: the kubelet hands a
            # container the IDs of every device of the requests it uses.
            if alloc.request not in requests:
                requests.add(alloc.request)
                cdi_ids.append(metadata.cdi_id(self.driver, claim.uid, alloc.request))
            unit, definition = located.unit, located.definition
            devices.append(
                PreparedDevice(
                    request=alloc.request,
                    pool=alloc.pool,
                    device=alloc.device,
                    resource=located.resource,
                    unit=unit.id,
                    cdi_ids=tuple(cdi_ids),
                    nodes=tuple((n.host_path, n.container_path) for n in unit.nodes),
                    attributes=metadata.attributes(
                        definition, unit, self.driver, paths[alloc.device]
                    ),
                    share_id=alloc.share_id,
                    cleanup=definition.hooks.cleanup,
                )
            )
        return tuple(devices)

    def _locate(self, alloc: AllocatedDevice) -> Located:
        device = clip(alloc.device, 80)
        if alloc.pool != self._inventory.pool:
            raise ClaimError(
                f"device {device} is in pool {clip(alloc.pool, 80)}, not in this node's pool"
                f" {self._inventory.pool}"
            )
        for owed in self._checkpoint.uncleaned.values():
            if owed.device == alloc.device:
                raise ClaimError(
                    f"device {device} ({owed.resource} unit {clip(owed.unit, 80)}) is out of"
                    f" service: {owed.why}"
                )
        located = self._inventory.locate(alloc.device)
        if located is None:
            raise ClaimError(f"device {device} is not on this node (unknown, or gone)")
        if not located.healthy:
            raise ClaimError(
                f"device {device} ({located.resource} unit {located.unit.id}) is not healthy"
            )
        return located

    def _plan(
        self, found: Sequence[tuple[AllocatedDevice, Located]], slice_seconds: float | None
    ) -> list[Plan]:
        """One plan per resource of the claim, over all its units of that resource (a
        shared device that several of its requests name is one unit)."""
        groups: dict[str, dict[str, Located]] = defaultdict(dict)
        for alloc, located in found:
            groups[located.resource].setdefault(alloc.device, located)
        return [
            plan_allocation(
                next(iter(units.values())).definition,
                [located.unit for located in units.values()],
                list(units),
                node_name=self._node_name,
                slice_seconds=slice_seconds,
            )
            for units in groups.values()
        ]

    async def _unprepare(self, claim: ClaimRef) -> ClaimResult:
        known = self._checkpoint.get(claim.uid)
        if known is None:
            return ClaimResult()  # never prepared here, or unprepared already
        if self.configured is None:
            raise ClaimError("the daemon has not applied its config yet (the kubelet retries)")
        units = [(d.resource, d.unit) for d in known.devices]
        async with self._slots, self._units_locked(units):
            await self._cleanup(known)
            await asyncio.to_thread(remove_claim_spec, self._cdi_dir, self.driver, claim.uid)
            named = (known.claim.namespace, known.claim.name)
            if not any(
                (p.claim.namespace, p.claim.name) == named and p.claim.uid != claim.uid
                for p in self._checkpoint
            ):  # else a claim of the same name, made anew, has the files now
                plugin_dir = self._checkpoint.path.parent
                await asyncio.to_thread(metadata.remove, plugin_dir, *named)
            await self._checkpoint.remove(claim.uid)
            self.on_change()
        log.info("unprepared claim %s (UID %s)", known.claim.named, claim.uid)
        return ClaimResult()

    async def _cleanup(self, known: PreparedClaim) -> None:
        """Run ``cleanup`` on the claim's units that no other recorded claim names: the
        hook each was handed out under, or, its definition gone from the config, record
        the unit as uncleaned (out of service until an admin releases it)."""
        shared = {
            (d.resource, d.unit)
            for other in self._checkpoint
            if other.claim.uid != known.claim.uid
            for d in other.devices
        }
        runs: dict[tuple[str, Exec], dict[str, PreparedDevice]] = defaultdict(dict)
        for device in known.devices:
            if (device.resource, device.unit) in shared:
                log.info(
                    "unprepare claim %s: %s unit %s is still prepared for another claim,"
                    " its cleanup waits for the last one",
                    known.claim.named,
                    device.resource,
                    device.unit,
                )
                continue
            hook = self._owed_hook(device)
            if hook is not None:
                runs[device.resource, hook].setdefault(device.device, device)
        for (resource, hook), named in runs.items():
            devices = list(named.values())
            if hook is _UNKNOWN_HOOK:
                why = (
                    f"the checkpoint does not record the cleanup hook of {resource} and the"
                    " node does not serve it"
                )
            elif resource not in (self.configured or ()):
                why = f"{resource} left the config"
            else:
                units = [self._unit(resource, d) for d in devices]
                node = self._node_name
                await self._run_hook(
                    HookRun(CLEANUP, hook, resource, units, list(named), node_name=node, logger=log)
                )
                continue
            for device in devices:
                await self._owe(known, device, why)

    def _owed_hook(self, device: PreparedDevice) -> Exec | None:
        """The cleanup hook the device was handed out under (an entry from before hooks
        were recorded: its definition's now, when the config has it)."""
        if device.recorded:
            return device.cleanup
        definition = self._inventory.definition(device.resource)
        if definition is not None:
            return definition.hooks.cleanup
        return _UNKNOWN_HOOK

    async def _owe(self, known: PreparedClaim, device: PreparedDevice, why: str) -> None:
        entry = Uncleaned(
            resource=device.resource,
            unit=device.unit,
            device=device.device,
            claim=known.claim.named,
            since=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            why=(
                f"{why} while claim {known.claim.named} held the unit, so its cleanup hook"
                " cannot run; clean the device, then delete"
                f" {self._checkpoint.path.parent / file_name(device.resource, device.unit)}"
            ),
        )
        await self._checkpoint.owe(entry)
        log.error(
            "unprepare claim %s: %s unit %s is not cleaned and stays out of service: %s",
            known.claim.named,
            device.resource,
            device.unit,
            entry.why,
        )

    @asynccontextmanager
    async def _units_locked(self, keys: Iterable[tuple[str, str]]) -> AsyncIterator[None]:
        """Hold the locks of these units, taken in one order (no two claims deadlock)."""
        async with AsyncExitStack() as stack:
            for key in sorted(set(keys)):
                await stack.enter_async_context(self._unit_locks.setdefault(key, asyncio.Lock()))
            yield

    def _unit(self, resource: str, device: PreparedDevice) -> Unit:
        """The unit as it is now, or as it was at prepare when it is gone."""
        for unit in self._inventory.units(resource):
            if unit.id == device.unit and unit.nodes:  # none: gone before the daemon saw it
                return unit
        return Unit(device.unit, tuple(DeviceNode(h, c) for h, c in device.nodes))


# A hook that cannot be known: the unit is owed a cleanup (``_cleanup``).
_UNKNOWN_HOOK = Exec(("<unrecorded>",), 1.0)
