"""SlicePublisher's logic over an in-memory SliceStore: no API server needed.

The same publisher, with the real API server behind it, is tested in
tests/test_dra_publisher.py; here each rule is tested alone, failures and
other writers included, on any machine.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from genericdp.discovery.model import DeviceNode, Unit
from genericdp.kube.client import ApiRequestError
from genericdp.kubeletplugin import slices
from genericdp.kubeletplugin.naming import device_name
from genericdp.kubeletplugin.publisher import SlicePublisher
from tests.dra_apislices import running
from tests.dra_fakes import DRIVER, NODE, MemorySlices
from tests.polling import eventually

SERIAL, AUDIO = "example.com/serial", "example.com/audio"


def unit(uid: str) -> Unit:
    return Unit(uid, (DeviceNode(f"/dev/{uid}", f"/dev/{uid}", 188, 0, "tty"),))


@pytest.fixture
def store() -> MemorySlices:
    return MemorySlices()


@pytest.fixture
async def publisher(store: MemorySlices) -> AsyncIterator[SlicePublisher]:
    publisher = SlicePublisher(store, adopt_grace=0)
    await publisher.start()
    yield publisher
    await publisher.close()


def left_behind(devices: dict[str, list[Unit]], generation: int) -> dict[str, dict[str, Any]]:
    """The slices a previous instance on this node wrote, as the server holds them."""
    wanted = {r: slices.devices(r, units, set(), driver=DRIVER) for r, units in devices.items()}
    made = slices.pool_slices(wanted, node=NODE, driver=DRIVER, generation=generation)
    found = {}
    for n, obj in enumerate(made.values()):
        obj["metadata"]["name"] = f"{obj['metadata']['generateName']}old{n:02d}"
        obj["metadata"]["resourceVersion"] = f"old-{n}"
        obj["metadata"]["ownerReferences"] = [{"kind": "Node", "uid": f"uid-of-{NODE}"}]
        found[obj["metadata"]["name"]] = obj
    return found


async def test_one_write_per_change_and_none_when_nothing_changed(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """A publish lands as one slice; the same publish again writes nothing."""
    await publisher.publish(SERIAL, [unit("a"), unit("b")], set())
    assert await publisher.flush()
    assert store.writes == 1
    assert set(store.devices()) == {device_name(SERIAL, "a"), device_name(SERIAL, "b")}
    await publisher.publish(SERIAL, [unit("a"), unit("b")], set())
    assert await publisher.flush()
    assert store.writes == 1
    await publisher.publish(SERIAL, [unit("a"), unit("b")], {"b"})
    assert await publisher.flush()
    assert store.writes == 2
    assert store.devices()[device_name(SERIAL, "b")]["attributes"]["healthy"] == {"bool": False}


async def test_a_burst_is_one_generation(store: MemorySlices, publisher: SlicePublisher) -> None:
    """Changes to several resources at once become one pool write, of one generation."""
    await publisher.publish(SERIAL, [unit("a")], set())
    await publisher.publish(AUDIO, [unit("c")], set())
    assert await publisher.flush()
    assert store.writes == 2  # one slice per resource
    assert store.generations() == {1}
    await publisher.publish(SERIAL, [unit("a"), unit("b")], set())
    assert await publisher.flush()
    assert store.generations() == {2}, "the whole pool moves to the new generation"


async def test_adoption_keeps_what_matches_and_deletes_what_is_no_longer_served(
    store: MemorySlices,
) -> None:
    """A restart writes nothing for slices that still match, and deletes the rest."""
    store.objects.update(left_behind({SERIAL: [unit("a")], AUDIO: [unit("c")]}, generation=3))
    publisher = SlicePublisher(store, adopt_grace=60)
    publisher.expect(SERIAL)
    await publisher.start()
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    assert set(store.devices()) == {device_name(SERIAL, "a")}
    assert store.writes == 2, "the kept slice at the new generation, the gone one deleted"
    assert store.generations() == {4}
    await publisher.close()

    again = SlicePublisher(store, adopt_grace=60)
    again.expect(SERIAL)
    await again.start()
    await again.publish(SERIAL, [unit("a")], set())
    assert await again.flush()
    assert store.writes == 2, "all matched: nothing written"
    await again.close()


async def test_the_first_write_waits_for_every_expected_resource(store: MemorySlices) -> None:
    """With two resources expected, the first write holds both: no slice of either is lost."""
    store.objects.update(left_behind({SERIAL: [unit("a")], AUDIO: [unit("c")]}, generation=1))
    publisher = SlicePublisher(store, adopt_grace=60)
    publisher.expect(SERIAL)
    publisher.expect(AUDIO)
    await publisher.start()
    await publisher.publish(SERIAL, [unit("a"), unit("b")], set())
    # The writer has the loop for a while (a bounded wait for what must not happen).
    assert not await publisher.flush(timeout=0.2)
    assert store.lists == 0, "nothing listed or written before every resource answered"
    await publisher.publish(AUDIO, [unit("c")], set())
    assert await publisher.flush()
    assert set(store.devices()) == {
        device_name(SERIAL, "a"),
        device_name(SERIAL, "b"),
        device_name(AUDIO, "c"),
    }
    assert store.generations() == {2}
    await publisher.close()


async def test_withdraw_deletes_the_resources_slices(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """A resource withdrawn leaves the pool; the others stay."""
    await publisher.publish(SERIAL, [unit("a")], set())
    await publisher.publish(AUDIO, [unit("c")], set())
    assert await publisher.flush()
    await publisher.withdraw(AUDIO)
    assert await publisher.flush()
    assert set(store.devices()) == {device_name(SERIAL, "a")}


async def test_failures_are_retried_with_one_warning_and_a_recovery_line(
    store: MemorySlices, publisher: SlicePublisher, caplog: pytest.LogCaptureFixture
) -> None:
    """An unreachable server, then a refusal: logged once, retried until the write lands."""
    store.failures = [
        ConnectionError("connection refused"),
        ApiRequestError("listing the ResourceSlices of node node-a", 503, "unavailable"),
    ]
    with caplog.at_level(logging.INFO, "genericdp.kubeletplugin.publisher"):
        await publisher.publish(SERIAL, [unit("a")], set())
        assert await publisher.flush(timeout=10)
    assert set(store.devices()) == {device_name(SERIAL, "a")}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "could not write the ResourceSlices of node node-a" in warnings[0]
    assert "ConnectionError: connection refused" in warnings[0]
    assert any("written again after" in r.getMessage() for r in caplog.records)


async def test_a_conflict_lists_again_and_writes_over_the_new_version(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """Someone else's write between ours (a 409 on replace): listed again, then replaced."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    (name,) = store.objects
    store.objects[name]["metadata"]["resourceVersion"] = "bumped-behind-our-back"
    await publisher.publish(SERIAL, [unit("a"), unit("b")], set())
    assert await publisher.flush(timeout=10)
    assert set(store.devices()) == {device_name(SERIAL, "a"), device_name(SERIAL, "b")}
    assert store.lists >= 2


async def test_a_slice_deleted_by_someone_else_is_written_again(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """The kubelet deletes a node's slices when it starts: the watch sees it; rewritten."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    (name,) = store.objects
    await store.someone_deletes(name)
    await store.until(lambda objects: bool(objects) and name not in objects)
    assert set(store.devices()) == {device_name(SERIAL, "a")}


async def test_a_tampered_slice_is_put_back(store: MemorySlices, publisher: SlicePublisher) -> None:
    """A device added by someone else goes again; our own writes cost no extra write."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    (name,) = store.objects
    writes = store.writes

    def intrude(obj: dict[str, Any]) -> None:
        obj["spec"]["devices"].append({"name": "intruder"})

    await store.someone_changes(name, intrude)
    await store.until(lambda objects: "intruder" not in str(objects))
    assert await publisher.flush()
    assert store.writes == writes + 1
    assert set(store.devices()) == {device_name(SERIAL, "a")}


async def test_a_watch_that_ends_goes_on_from_its_last_version(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """A delete while the watch is down is reported by the next watch, which starts where
    the last one ended (no list needed); the restart is counted as ``ended``."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    await eventually(lambda: store.watches == 1, "the watch open")
    (name,) = store.objects
    lists = store.lists
    store.end_watches()
    await store.someone_deletes(name)
    await store.until(lambda objects: bool(objects) and name not in objects)
    assert store.watches == 2
    assert store.lists == lists + 1  # the writer's, to compare: the watch did not list
    assert publisher.watch_restarts == {"ended": 1, "expired": 0, "failed": 0}


async def test_a_version_the_server_forgot_lists_again(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """410 Gone: the watch lists again; the list, not an event, shows the delete."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    await eventually(lambda: store.watches == 1, "the watch open")
    (name,) = store.objects
    store.end_watches()
    await store.someone_deletes(name, quietly=True)
    store.compact()
    await store.until(lambda objects: bool(objects) and name not in objects)
    assert publisher.watch_restarts["expired"] == 1


async def test_what_no_watch_reports_is_found_by_the_resync(store: MemorySlices) -> None:
    """A change the server never reports (a lost event) is put right at the next resync."""
    publisher = SlicePublisher(store, adopt_grace=0, resync=0.3)
    await publisher.start()
    try:
        await publisher.publish(SERIAL, [unit("a")], set())
        assert await publisher.flush()
        (name,) = store.objects
        await store.someone_deletes(name, quietly=True)
        await store.until(lambda objects: bool(objects) and name not in objects, timeout=5)
    finally:
        await publisher.close()


async def test_a_failing_watch_is_retried_after_a_backoff(
    store: MemorySlices, publisher: SlicePublisher
) -> None:
    """A watch request that fails is counted and tried again: changes after it are seen."""
    await publisher.publish(SERIAL, [unit("a")], set())
    assert await publisher.flush()
    await eventually(lambda: store.watches == 1, "the watch open")
    store.failures = [ConnectionError("connection reset")]
    store.end_watches()
    await eventually(lambda: publisher.watch_restarts["failed"] == 1, "the failure counted")
    await eventually(lambda: store.watches == 2, "the watch open again")
    (name,) = store.objects
    await store.someone_deletes(name)
    await store.until(lambda objects: bool(objects) and name not in objects)


async def test_close_writes_what_is_pending_then_stops(store: MemorySlices) -> None:
    """A publish just before close still lands; afterwards nothing runs (no leaked task)."""
    publisher = SlicePublisher(store, adopt_grace=0, coalesce=0.2)
    await publisher.start()
    await publisher.publish(SERIAL, [unit("a")], set())
    await publisher.close()
    assert set(store.devices()) == {device_name(SERIAL, "a")}


class NoConsumableCapacity(MemorySlices):
    """An API server whose DRAConsumableCapacity gate is off: it drops the fields."""

    async def _store(self, kind: str, obj: dict[str, Any], *, ours: bool = True) -> dict[str, Any]:
        kept = copy.deepcopy(obj)
        kept["spec"]["devices"] = slices.unshared(kept["spec"].get("devices") or [])
        return await super()._store(kind, kept, ours=ours)


async def test_sharing_the_server_drops_is_said_once_and_costs_no_rewrites(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Gate off: a warning at the first write, then shared devices are published as the
    server keeps them, so later changes write once each and a restart writes nothing."""
    store = NoConsumableCapacity()
    publisher = SlicePublisher(store, adopt_grace=0)
    await publisher.start()
    shared = slices.DeviceOptions(shares=3)
    try:
        with caplog.at_level(logging.WARNING):
            await publisher.publish(SERIAL, [unit("a")], set(), options=shared)
            assert await publisher.flush()
        assert [r.message for r in caplog.records if "DRAConsumableCapacity" in r.message]
        assert "allowMultipleAllocations" not in store.devices()[device_name(SERIAL, "a")]
        writes = store.writes
        await publisher.publish(SERIAL, [unit("a"), unit("b")], set(), options=shared)
        assert await publisher.flush()
        assert store.writes == writes + 1
    finally:
        await publisher.close()
    again = SlicePublisher(store, adopt_grace=0)
    await again.start()
    try:
        await again.publish(SERIAL, [unit("a"), unit("b")], set(), options=shared)
        assert await again.flush()
        assert store.writes == writes + 2  # once, to learn that the server drops it
        await again.publish(SERIAL, [unit("b"), unit("a")], set(), options=shared)
        assert await again.flush()
        assert store.writes == writes + 2
    finally:
        await again.close()


def _stranger(key_of: str, uid: str) -> dict[str, Any]:
    """A slice of our node and driver with our label for ``key_of``'s first slice, owned
    by ``uid`` (empty: no owner)."""
    wanted = {key_of: slices.devices(key_of, [unit("s")], set(), driver=DRIVER)}
    (_, obj), *_ = slices.pool_slices(wanted, node=NODE, driver=DRIVER, generation=7).items()
    if uid:
        obj["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "x", "uid": uid}]
    return obj


async def test_a_restart_adopts_its_slices_by_label_and_owner(store: MemorySlices) -> None:
    """The slices carry names the API server made: a second publisher finds them by their
    label and owner and writes nothing for an unchanged pool (no duplicate)."""
    async with running(store) as first:
        await first.publish(SERIAL, [unit("a")], set())
        await first.publish(AUDIO, [unit("c")], set())
        assert await first.flush()
    names, writes = set(store.objects), store.writes
    assert all(
        o["metadata"]["ownerReferences"][0]["uid"] == f"uid-of-{NODE}"
        for o in store.objects.values()
    )
    async with running(store) as second:
        await second.publish(SERIAL, [unit("a")], set())
        await second.publish(AUDIO, [unit("c")], set())
        assert await second.flush()
        assert set(store.objects) == names
        assert store.writes == writes


async def test_a_strangers_slice_with_our_label_is_left_alone(
    store: MemorySlices, caplog: pytest.LogCaptureFixture
) -> None:
    """A slice with our label and another owner is not adopted (neither replaced nor
    deleted), said once; ours is written beside it. Our own slices of a version that
    named them (no label, no owner) are replaced."""
    stranger = await store.create(_stranger(SERIAL, "someone-else"))
    unlabelled = _stranger(AUDIO, "")
    unlabelled["metadata"] = {"name": "node-a.genericdp.io.example.com.audio.0-00000000"}
    await store.create(unlabelled)
    async with running(store) as publisher:
        await publisher.publish(SERIAL, [unit("a")], set())
        assert await publisher.flush()
        assert store.objects[stranger["metadata"]["name"]] == stranger
        assert unlabelled["metadata"]["name"] not in store.objects
        assert publisher.strangers == 1
        assert set(store.devices()) == {device_name(SERIAL, "a"), device_name(SERIAL, "s")}
    said = [r.getMessage() for r in caplog.records if "another owner" in r.getMessage()]
    assert len(said) == 1, said


async def test_a_second_slice_of_one_key_is_deleted(store: MemorySlices) -> None:
    """Two slices of one key (a create whose answer was lost, then retried): one goes."""
    async with running(store) as publisher:
        await publisher.publish(SERIAL, [unit("a")], set())
        assert await publisher.flush()
    (only,) = store.objects.values()
    twin = copy.deepcopy(only)
    del twin["metadata"]["name"]
    await store.create(twin)
    async with running(store) as publisher:
        await publisher.publish(SERIAL, [unit("a")], set())
        assert await publisher.flush()
        assert list(store.objects) == [only["metadata"]["name"]]


class EventsFirst(MemorySlices):
    """An API server whose watch event of a write reaches the watcher before the write's
    answer reaches the writer (as it often does over the network)."""

    async def _store(self, kind: str, obj: dict[str, Any], *, ours: bool = True) -> dict[str, Any]:
        stored = await super()._store(kind, obj, ours=ours)
        for _ in range(5):  # the watch task runs and takes the event first
            await asyncio.sleep(0)
        return stored


async def test_the_watch_event_of_our_own_write_arriving_first_lists_nothing() -> None:
    """The events of our writes, even ones seen before the answers, start no list or write."""
    store = EventsFirst()
    publisher = SlicePublisher(store, adopt_grace=0)
    await publisher.start()
    try:
        await publisher.publish(SERIAL, [unit("a")], set())
        await publisher.publish(AUDIO, [unit("b")], set())
        assert await publisher.flush()
        await publisher.publish(SERIAL, [unit("a"), unit("c")], set())  # both slices replaced
        assert await publisher.flush()
        assert (store.lists, store.writes) == (1, 4)
    finally:
        await publisher.close()
