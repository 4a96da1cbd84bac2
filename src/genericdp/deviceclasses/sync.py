"""DeviceClasses kept equal to the config: the loop of ``genericdp reconcile-classes``.

The classes wanted are ``deviceclasses.device_classes`` of the config. A class is ours
only while it carries ``owner_labels(driver)``: one without them is never written (a
wanted name it holds is *foreign*, reported and left alone). Ours are created, replaced
when they differ (a hand edit is undone), and deleted once their resource has left the
config *and* no ResourceSlice of the driver holds a device of it (until then a node may
have pods using the class: it is *kept*).

A sync lists the DeviceClasses (few), the driver's slices only while some class is kept,
and writes only what differs. It runs after a config change, a DeviceClass event, a
slice event while some class is kept, a failed sync (with backoff) and every
``resync`` seconds; each write only while ``leading()`` (the Lease).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from genericdp.aio import Backoff, wait_event
from genericdp.config.model import Config
from genericdp.config.names import device_class_name
from genericdp.deviceclasses import device_classes, owner_labels
from genericdp.deviceclasses.api import ClassApi
from genericdp.kube.client import ApiRequestError
from genericdp.kube.listwatch import ListWatch
from genericdp.runtime.reconcile import Plan, plan

log = logging.getLogger(__name__)

COALESCE = 0.05  # seconds of events gathered into one sync
RESYNC = 60.0
WRITTEN = {"create": "created", "update": "updated"}


def owned(obj: Mapping[str, Any], driver: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in owner_labels(driver).items())


@dataclass(frozen=True)
class ClassPlan:
    """What one sync writes, and what it leaves."""

    create: tuple[dict[str, Any], ...] = ()
    update: tuple[dict[str, Any], ...] = ()  # the server's object with our spec and labels
    delete: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # ours, out of the config, still published by some node
    foreign: tuple[str, ...] = ()  # wanted names held by classes without our labels


def plan_classes(
    desired: list[dict[str, Any]],
    present: Mapping[str, Mapping[str, Any]],
    driver: str,
    published: set[str] | None,
) -> ClassPlan:
    """What to write. ``published``: the class names of the resources some node publishes;
    None when not listed (then every class out of the config is kept)."""
    wanted = {c["metadata"]["name"]: c for c in desired}
    create, update, foreign = [], [], []
    for name, want in wanted.items():
        have = present.get(name)
        if have is None:
            create.append(want)
        elif not owned(have, driver):
            foreign.append(name)
        elif have.get("spec") != want["spec"]:
            update.append(_merged(have, want))
    leftover = sorted(n for n, c in present.items() if n not in wanted and owned(c, driver))
    kept = [n for n in leftover if published is None or n in published]
    delete = [n for n in leftover if n not in kept]
    return ClassPlan(tuple(create), tuple(update), tuple(delete), tuple(kept), tuple(foreign))


def _merged(have: Mapping[str, Any], want: Mapping[str, Any]) -> dict[str, Any]:
    """``have`` with ``want``'s spec: its other labels, annotations and version stay."""
    obj = copy.deepcopy(dict(have))
    obj["spec"] = copy.deepcopy(want["spec"])
    return obj


@dataclass
class SyncStatus:
    """What the last sync found, for /readyz and the metrics."""

    ok: bool = False
    error: str | None = None
    owned: int = 0
    kept: tuple[str, ...] = ()
    foreign: tuple[str, ...] = ()


class Recorder:
    """What the reconciler reports (the Prometheus one is ``metrics.ClassMetrics``)."""

    def write(self, action: str, *, ok: bool) -> None:
        """A create, update or delete, and whether it went through."""

    def sync(self, *, ok: bool) -> None:
        """One sync, and whether it completed."""


class ClassReconciler:
    """Keeps ``driver``'s DeviceClasses equal to the config it is given (``apply``)."""

    def __init__(
        self,
        api: ClassApi,
        *,
        leading: Callable[[], bool],
        resync: float = RESYNC,
        recorder: Recorder | None = None,
    ) -> None:
        self._api = api
        self.driver = api.driver
        self._leading = leading
        self._resync = resync
        self._recorder = recorder or Recorder()
        self.config: Config | None = None  # None until a valid config is given
        self._desired: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self.status = SyncStatus()
        self._foreign_said: set[str] = set()

    async def apply(self, config: Config, *, if_changed: bool = False) -> Plan:  # noqa: ARG002 -- the ReloadTarget signature
        """Want the classes of ``config`` from now on (the config watch's ``ReloadTarget``)."""
        desired = device_classes(config, self.driver)
        steps = plan(self.config.resources if self.config else (), config.resources)
        self.config, self._desired = config, desired
        self.wake()
        return steps

    def wake(self) -> None:
        self._wake.set()

    def published_changed(self) -> None:
        """A slice of the driver changed: only a kept class can be affected."""
        if self.status.kept:
            self.wake()

    async def run(self) -> None:
        """Sync on every wake and every ``resync`` seconds, while leading, until cancelled."""
        backoff = Backoff(initial=0.2, maximum=30.0)
        while True:
            await wait_event(self._wake, self._resync)
            await asyncio.sleep(COALESCE)
            self._wake.clear()
            if self.config is None or not self._leading():
                continue
            try:
                await self.sync()
            except ApiRequestError as err:
                if not self._leading():  # no retry: the elector wakes us once it leads again
                    log.info("DeviceClasses: sync stopped, the lease is not held: %s", err)
                    continue
                self.status.ok, self.status.error = False, str(err)
                self._recorder.sync(ok=False)
                log.warning("DeviceClasses not synced: %s", err)
                await asyncio.sleep(backoff.next())
                self.wake()
            else:
                self._recorder.sync(ok=True)
                backoff.reset()

    async def sync(self) -> ClassPlan:
        """Compare once and write what differs (as long as we lead)."""
        present = await self._api.classes()
        steps = plan_classes(self._desired, present, self.driver, None)
        if steps.kept:  # only now is it worth listing every node's slices
            resources = await self._api.published_resources()
            published = {device_class_name(r) for r in resources}
            steps = plan_classes(self._desired, present, self.driver, published)
        write = self._api.write_class
        writes: list[tuple[str, str, Callable[[], Awaitable[None]]]] = [
            *(("create", o["metadata"]["name"], partial(write, o, create=True))
              for o in steps.create),
            *(("update", o["metadata"]["name"], partial(write, o, create=False))
              for o in steps.update),
            *(("delete", n, partial(self._api.delete_class, n)) for n in steps.delete),
        ]  # fmt: skip
        failed: list[ApiRequestError] = []
        for action, name, request in writes:
            try:
                await self._write(action, name, request)
            except ApiRequestError as err:
                if not self._leading():
                    raise
                failed.append(err)  # the others are still written
        self._report(steps, present)
        if failed:
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            first = failed[0]
            raise ApiRequestError(str(first) + more, first.code, first.reason)
        return steps

    async def _write(self, action: str, name: str, request: Callable[[], Awaitable[None]]) -> None:
        if not self._leading():
            raise ApiRequestError(f"{action} DeviceClass {name}", 0, "the lease is not held")
        try:
            await request()
        except ApiRequestError:
            self._recorder.write(action, ok=False)
            raise
        self._recorder.write(action, ok=True)
        done = WRITTEN.get(action, "deleted: its resource left the config and no node publishes it")
        log.info("DeviceClass %s: %s", name, done)

    def _report(self, steps: ClassPlan, present: Mapping[str, Mapping[str, Any]]) -> None:
        for name in sorted(set(steps.foreign) - self._foreign_said):
            log.warning(
                "DeviceClass %s exists without the labels %s: left alone; delete it (or give"
                " it the labels) for this driver's class to be made",
                name, owner_labels(self.driver),
            )  # fmt: skip
        for name in sorted(set(steps.kept) - set(self.status.kept)):
            log.info("DeviceClass %s: left the config, kept while a node publishes it", name)
        self._foreign_said = set(steps.foreign)
        deleted = set(steps.delete)
        ours = [n for n, c in present.items() if owned(c, self.driver) and n not in deleted]
        self.status = SyncStatus(
            ok=True,
            owned=len(set(ours) | {c["metadata"]["name"] for c in steps.create}),
            kept=steps.kept,
            foreign=steps.foreign,
        )

    async def watch(self, kind: str) -> None:
        """Wake at each list and change of the DeviceClasses (``classes``) or the driver's
        slices (``slices``), until cancelled."""
        on_event = self.wake if kind == "classes" else self.published_changed
        source = self._api.changes(kind, on_event)
        await ListWatch(source.what, source).run()
