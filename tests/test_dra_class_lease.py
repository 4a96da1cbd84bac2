"""The reconciler's plan (pure) and its Lease against the real kube-apiserver: a replica
whose Lease is taken, or that cannot renew it, stops writing, and before anyone else may."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import AsyncIterator, Callable

import pytest
from lightkube.resources.coordination_v1 import Lease

from genericdp.config import load_text
from genericdp.config.model import Config
from genericdp.config.names import device_class_name as class_name
from genericdp.deviceclasses import device_class
from genericdp.deviceclasses.api import ClassApi
from genericdp.deviceclasses.sync import ClassReconciler, plan_classes
from genericdp.kube import client as kubeapi
from genericdp.kube.client import ApiRequestError
from genericdp.kube.lease import LeaseElector, Leases
from tests.apiserver import ApiServer
from tests.polling import eventually

DRIVER = "lease.classes.test"
_leases = itertools.count()


def test_the_plan_creates_updates_keeps_and_deletes_only_ours() -> None:
    a, b, c = "x.test/a", "x.test/b", "x.test/c"
    desired = [device_class(a, DRIVER), device_class(b, DRIVER)]
    edited = device_class(b, DRIVER)
    edited["spec"]["extendedResourceName"] = "x.test/other"
    edited["metadata"]["resourceVersion"] = "7"
    edited["metadata"]["annotations"] = {"note": "kept"}
    theirs = device_class(c, DRIVER)
    theirs["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "genericdp"}  # no driver
    other_driver = device_class("x.test/d", "another.test")
    present = {
        class_name(b): edited,
        class_name(c): theirs,
        class_name("x.test/d"): other_driver,
        class_name("x.test/e"): device_class("x.test/e", DRIVER),
        class_name("x.test/f"): device_class("x.test/f", DRIVER),
    }
    steps = plan_classes(desired, present, DRIVER, {class_name("x.test/e")})
    assert [o["metadata"]["name"] for o in steps.create] == [class_name(a)]
    (update,) = steps.update
    assert update["spec"] == desired[1]["spec"]
    assert update["metadata"]["resourceVersion"] == "7"  # a change meanwhile is a conflict
    assert update["metadata"]["annotations"] == {"note": "kept"}
    assert steps.kept == (class_name("x.test/e"),)
    assert steps.delete == (class_name("x.test/f"),)
    assert steps.foreign == ()
    unlisted = plan_classes(desired, present, DRIVER, None)
    assert unlisted.delete == ()  # slices not listed: nothing is deleted
    collision = plan_classes([device_class(c, DRIVER)], present, DRIVER, set())
    assert collision.foreign == (class_name(c),)
    # Every class of ours but the one wanted goes (no slice lists any); c is left alone.
    assert collision.delete == (class_name(b), class_name("x.test/e"), class_name("x.test/f"))
    assert len(collision.create + collision.update) + len(collision.delete) == 3


class Cuttable(Leases):
    """The real requests until ``cut``: then every Lease request fails as a dead network."""

    cut = False

    async def get_lease(self, namespace: str, name: str) -> Lease | None:
        if self.cut:
            raise ApiRequestError(f"reading Lease {namespace}/{name}", 0, "connection refused")
        return await super().get_lease(namespace, name)

    async def write_lease(self, lease: Lease, *, create: bool) -> Lease:
        if self.cut and not create:
            raise ApiRequestError("updating the Lease", 0, "connection refused")
        return await super().write_lease(lease, create=create)


@contextlib.asynccontextmanager
async def running(*electors: LeaseElector) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(e.run(), name=f"lease/{e.identity}") for e in electors]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def lease_name() -> str:
    return f"lease-test-{next(_leases)}-{os.getpid()}"


async def first_true(condition: Callable[[], bool], timeout: float = 20.0) -> float:  # noqa: ASYNC109
    """The loop time at which ``condition`` was first seen true (polled every 10 ms)."""
    await eventually(condition, "the lease changing hands", timeout=timeout)
    return asyncio.get_running_loop().time()


async def test_a_replica_whose_lease_is_taken_stops_writing(
    apiserver: ApiServer, client: kubeapi.AsyncClient
) -> None:
    """Someone else's record in the Lease: the holder stops leading at its next renewal,
    and its reconciler refuses to send a write."""
    name = lease_name()
    elector = LeaseElector(Leases(client), namespace="default", name=name, identity="a", duration=2)
    reconciler = ClassReconciler(ClassApi(client, driver=DRIVER), leading=elector.leading)
    async with running(elector):
        await eventually(elector.leading, "the lease taken")
        patch = {"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60}}
        apiserver.kubectl(
            "patch", "lease", name, "-n", "default", "--type=merge", "-p", json.dumps(patch)
        )
        await eventually(lambda: not elector.leading(), "the lease lost")
        assert not elector.leading()
    await reconciler.apply(_config())
    with pytest.raises(ApiRequestError, match="the lease is not held"):
        await reconciler.sync()
    classes = json.loads(apiserver.kubectl("get", "deviceclasses", "-o", "json"))["items"]
    assert class_name("x.test/a") not in {c["metadata"]["name"] for c in classes}
    lease = json.loads(apiserver.kubectl("get", "lease", name, "-n", "default", "-o", "json"))
    assert lease["spec"]["holderIdentity"] == "intruder"


async def test_a_holder_that_cannot_renew_stops_before_another_may_start(
    client: kubeapi.AsyncClient,
) -> None:
    """Cut off from the API server, the holder stops leading within two thirds of the
    duration; the standby takes the Lease only after the whole duration, so the two
    never lead at once."""
    name = lease_name()
    cut = Cuttable(client)
    a = LeaseElector(cut, namespace="default", name=name, identity="a", duration=2)
    b = LeaseElector(Leases(client), namespace="default", name=name, identity="b", duration=2)
    async with running(a):
        await eventually(a.leading, "a holds the lease")
        async with running(b):
            both: list[bool] = []
            watcher = asyncio.create_task(_watch_both(a, b, both))
            cut.cut = True
            a_stopped = await first_true(lambda: not a.leading())
            b_started = await first_true(b.leading)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
    assert a_stopped < b_started
    assert not any(both), "both led at once"


async def _watch_both(a: LeaseElector, b: LeaseElector, seen: list[bool]) -> None:
    while True:
        seen.append(a.leading() and b.leading())
        await asyncio.sleep(0.005)


def _config() -> Config:
    return load_text("version: v1\nresources:\n  - name: x.test/a\n    match: [glob: /dev/null]\n")
