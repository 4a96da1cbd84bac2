"""SlicePublisher against a real kube-apiserver: publish, diff, takeover, withdraw, latency.

Each test uses a node name of its own (ResourceSlices are cluster-scoped),
so the tests share the session's API server without seeing each other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER, device_name
from genericdp.kubeletplugin.publisher import MIN_WRITE_GAP
from genericdp.kubeletplugin.slices import MAX_DEVICES_PER_SLICE
from tests.apiserver import ApiServer, free_port
from tests.dra_apislices import api_slices, devices_of, fresh_node, held, running, unit
from tests.polling import eventually

RESOURCE = "example.com/serial"


@pytest.fixture
def node_name() -> str:
    return fresh_node("node")


async def wait_for(client: kubeapi.AsyncClient, node: str, check: Any, what: str) -> None:
    state: dict[str, dict[str, Any]] = {}

    async def poll() -> bool:
        state.clear()
        state.update(await held(client, node))
        return bool(check(state))

    loop_deadline = time.monotonic() + 10
    while not await poll():
        if time.monotonic() > loop_deadline:
            pytest.fail(f"still not true after 10s: {what}; slices: {state}")
        await eventually(lambda: True)


async def test_publish_writes_one_slice_with_typed_attributes(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """The devices land in one slice of the node's pool, with the attributes CEL reads."""
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, [unit("a", numa=1, serial="A1B2"), unit("b")], set())
        assert await publisher.flush()
    objs = await held(client, node_name)
    assert len(objs) == 1
    spec = next(iter(objs.values()))["spec"]
    assert spec["pool"] == {"name": node_name, "generation": 1, "resourceSliceCount": 1}
    found = devices_of(objs)
    a = found[device_name(RESOURCE, "a")]["attributes"]
    assert a["resource"] == {"string": RESOURCE}
    assert a["unitID"] == {"string": "a"}
    assert a["numaNode"] == {"int": 1}
    assert a["serial"] == {"string": "A1B2"}
    assert a["healthy"] == {"bool": True}
    assert "taints" not in found[device_name(RESOURCE, "a")]


async def test_only_changes_are_written_and_bursts_coalesce(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """The same units again write nothing; ten changes in a row become one write."""
    store = api_slices(client, node_name)
    units = [unit("a"), unit("b")]
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, units, set())
        assert await publisher.flush()
        before = store.writes
        await publisher.publish(RESOURCE, list(units), set())
        assert await publisher.flush()
        assert store.writes == before
        for i in range(10):
            await publisher.publish(RESOURCE, [*units, unit(f"c{i}")], set())
        assert await publisher.flush()
        assert store.writes == before + 1
        assert set(devices_of(await held(client, node_name))) == {
            device_name(RESOURCE, u) for u in ("a", "b", "c9")
        }


async def test_unhealthy_devices_stay_listed_with_a_taint_and_healthy_false(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """The 1.36 API server keeps device taints: an unhealthy unit is NoSchedule, not gone."""
    store = api_slices(client, node_name)
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, [unit("a"), unit("b")], {"b"})
        assert await publisher.flush()
        found = devices_of(await held(client, node_name))
        b = found[device_name(RESOURCE, "b")]
        assert b["attributes"]["healthy"] == {"bool": False}
        assert [(t["key"], t["effect"]) for t in b["taints"]] == [
            (f"{DEFAULT_DRIVER}/unhealthy", "NoSchedule")
        ]
        assert "timeAdded" in b["taints"][0]  # filled in by the server, ignored when comparing
        writes = store.writes
        await publisher.publish(RESOURCE, [unit("a"), unit("b")], {"b"})
        assert await publisher.flush()
        assert store.writes == writes
        await publisher.publish(RESOURCE, [unit("a"), unit("b")], set())
        assert await publisher.flush()
        found = devices_of(await held(client, node_name))
        assert "taints" not in found[device_name(RESOURCE, "b")]


def generations(objs: dict[str, dict[str, Any]]) -> set[tuple[int, int]]:
    """The (generation, resourceSliceCount) pairs of the slices ``objs``."""
    return {
        (o["spec"]["pool"]["generation"], o["spec"]["pool"]["resourceSliceCount"])
        for o in objs.values()
    }


async def test_many_units_split_into_slices_of_one_generation(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """More units than a slice may hold: several slices, one pool, one generation, all counted."""
    many = [unit(f"u{i:03}") for i in range(MAX_DEVICES_PER_SLICE * 2 + 1)]
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, many, {"u000"})
        await publisher.publish("example.com/other", [unit("x")], set())
        assert await publisher.flush()
        objs = await held(client, node_name)
        assert len(objs) == 4
        assert generations(objs) == {(1, 4)}
        assert len(devices_of(objs)) == len(many) + 1
        await publisher.publish(RESOURCE, many[:3], set())
        assert await publisher.flush()
        assert generations(await held(client, node_name)) == {(2, 2)}


async def test_withdraw_deletes_the_resources_slices(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        await publisher.publish("example.com/other", [unit("x")], set())
        assert await publisher.flush()
        await publisher.withdraw("example.com/other")
        assert await publisher.flush()
        objs = await held(client, node_name)
        assert set(devices_of(objs)) == {device_name(RESOURCE, "a")}
        assert {o["spec"]["pool"]["resourceSliceCount"] for o in objs.values()} == {1}


async def published_once(
    client: kubeapi.AsyncClient, node: str, *resources: str, uid: str = "u"
) -> dict[str, dict[str, Any]]:
    """A previous instance on ``node`` published one unit ``uid`` of each of ``resources``
    and stopped; the slices it left."""
    async with running(api_slices(client, node)) as first:
        for name in resources:
            await first.publish(name, [unit(uid)], set())
        assert await first.flush()
    return await held(client, node)


async def test_a_new_instance_takes_over_without_rewriting_and_removes_the_rest(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """A restart publishing the same units writes nothing; an unserved resource goes."""
    async with running(api_slices(client, node_name)) as first:
        await first.publish(RESOURCE, [unit("a")], set())
        await first.publish("example.com/gone", [unit("g")], set())
        assert await first.flush()
    kept = await held(client, node_name)

    store = api_slices(client, node_name)
    async with running(store, adopt_grace=0.3) as second:
        await second.publish(RESOURCE, [unit("a")], set())
        assert await second.flush()
        after = await held(client, node_name)
        assert set(devices_of(after)) == {device_name(RESOURCE, "a")}
        assert store.writes == 2  # the kept slice with the new count, the gone one deleted

    store = api_slices(client, node_name)
    async with running(store, adopt_grace=0.3) as third:
        await third.publish(RESOURCE, [unit("a")], set())
        assert await third.flush()
        assert store.writes == 0
        still = await held(client, node_name)
        assert [o["metadata"]["resourceVersion"] for o in still.values()] == [
            o["metadata"]["resourceVersion"] for o in after.values()
        ]
        assert kept  # the first instance's slices were there to adopt


async def test_the_takeover_waits_for_every_expected_resource(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """A resource slower to scan keeps its slice (never deleted and made again); one write."""
    before = await published_once(
        client, node_name, "example.com/a", "example.com/b", "example.com/gone"
    )
    store = api_slices(client, node_name)
    expect = ("example.com/a", "example.com/b")
    async with running(store, adopt_grace=60, expect=expect) as second:
        await second.publish("example.com/a", [unit("u")], set())
        # b has not published: nothing is written, however long that takes (up to the grace).
        assert not await second.flush(timeout=0.5)
        assert await held(client, node_name) == before
        await second.publish("example.com/b", [unit("u")], set())
        assert await second.flush()
        after = await held(client, node_name)
        assert store.writes == 3  # a and b with the new count, gone deleted
        uids = {name: obj["metadata"]["uid"] for name, obj in after.items()}
        assert uids == {name: before[name]["metadata"]["uid"] for name in after}
        assert len(after) == 2
        assert {obj["spec"]["pool"]["generation"] for obj in after.values()} == {2}


async def test_a_resource_that_never_publishes_holds_the_takeover_only_for_the_grace(
    client: kubeapi.AsyncClient, node_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``adopt_grace`` the first write goes ahead, and says which resource it gave up on."""
    await published_once(client, node_name, "example.com/a", "example.com/stuck")
    expect = ("example.com/a", "example.com/stuck")
    with caplog.at_level(logging.INFO, "genericdp.kubeletplugin.publisher"):
        async with running(api_slices(client, node_name), adopt_grace=0.3, expect=expect) as second:
            await second.publish("example.com/a", [unit("u")], set())
            assert await second.flush()
            found = set(devices_of(await held(client, node_name)))
            assert found == {device_name("example.com/a", "u")}
    assert any("without waiting longer for example.com/stuck" in m for m in caplog.messages)


async def test_someone_elses_edit_is_a_conflict_that_is_retried(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    """A slice changed behind the publisher's back: the replace conflicts; it lists and wins."""
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        name = next(iter(await held(client, node_name)))
        apiserver.kubectl("label", "resourceslice", name, "edited=yes")
        await publisher.publish(RESOURCE, [unit("a"), unit("b")], set())
        assert await publisher.flush(timeout=10)
        assert set(devices_of(await held(client, node_name))) == {
            device_name(RESOURCE, "a"),
            device_name(RESOURCE, "b"),
        }


async def test_slice_update_latency_is_under_a_second(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """From publish to the change readable from the API server (the figures belong in
    docs/contributing/performance.md)."""
    latencies = []
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        for i in range(5):
            started = time.monotonic()
            await publisher.publish(RESOURCE, [unit("a")], {"a"} if i % 2 == 0 else set())
            want = i % 2 == 0

            def healthy_is(state: dict[str, dict[str, Any]], want: bool = want) -> bool:
                found = devices_of(state).get(device_name(RESOURCE, "a"))
                return found is not None and found["attributes"]["healthy"] == {"bool": not want}

            await wait_for(client, node_name, healthy_is, f"health change {i} in the slice")
            latencies.append(time.monotonic() - started)
    logging.getLogger(__name__).info("slice update latencies: %s", latencies)
    assert max(latencies) < 1.0, latencies


async def test_an_unreachable_api_server_is_logged_and_retried_never_raised(
    caplog: pytest.LogCaptureFixture, apiserver: ApiServer, tmp_path: Any
) -> None:
    """Nothing listens: publish returns, the writer warns and keeps trying, close returns."""
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(
        apiserver.kubeconfig.read_text().replace(apiserver.url, f"https://127.0.0.1:{free_port()}")
    )
    api = kubeapi.connect(dead)
    with caplog.at_level(logging.WARNING, "genericdp.kubeletplugin.publisher"):
        async with running(ApiSlices(api, node="nowhere")) as publisher:
            await publisher.publish(RESOURCE, [unit("a")], set())
            await eventually(
                lambda: any(
                    "could not write the ResourceSlices" in r.message for r in caplog.records
                ),
                "the warning about the unreachable API server",
            )
            assert not await publisher.flush(timeout=0.3)
    await api.close()


async def test_slices_deleted_by_someone_else_come_back(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    """The kubelet deletes a node's slices when it starts: the watch notices, and rewrites."""
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        apiserver.kubectl("delete", "resourceslices", f"--field-selector=spec.nodeName={node_name}")
        await wait_for(
            client,
            node_name,
            lambda state: set(devices_of(state)) == {device_name(RESOURCE, "a")},
            "the deleted slice written again",
        )


async def test_a_tampered_slice_is_put_back_and_a_relabelled_one_is_left_alone(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    store = api_slices(client, node_name)
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        name = next(iter(await held(client, node_name)))
        writes = store.writes
        apiserver.kubectl("label", "resourceslice", name, "seen=yes")
        patch = '{"spec": {"devices": [{"name": "intruder"}]}}'
        apiserver.kubectl("patch", "resourceslice", name, "--type=merge", "-p", patch)
        await wait_for(
            client,
            node_name,
            lambda state: set(devices_of(state)) == {device_name(RESOURCE, "a")},
            "the tampered slice put back",
        )
        assert await publisher.flush()
        # Events come in order: the label was seen first, and cost no write.
        assert store.writes == writes + 1


async def test_two_resources_whose_names_read_alike_are_both_published(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """``a.com/x.y`` and ``a.com.x/y`` (one name once '/' is '.') get a slice each and
    every device of both is in the pool."""
    async with running(api_slices(client, node_name)) as publisher:
        await publisher.publish("a.com/x.y", [unit("a")], set())
        await publisher.publish("a.com.x/y", [unit("b")], set())
        assert await publisher.flush()
        objs = await held(client, node_name)
        assert len(objs) == 2
        assert set(devices_of(objs)) == {
            device_name("a.com/x.y", "a"),
            device_name("a.com.x/y", "b"),
        }


async def test_a_flapping_device_is_a_few_pool_writes_a_second_ending_in_its_last_state(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """A unit that appears and disappears 90 times a second for 1.5 s: the pool is
    rewritten at most once each ``MIN_WRITE_GAP`` (it was 52-70 whole-pool rewrites in
    15 s, every flap one), and the slices end in the last state (the first change of a
    quiet pool still goes out at once: the latency test above)."""
    store = api_slices(client, node_name)
    async with running(store) as publisher:
        await publisher.publish(RESOURCE, [unit("a")], set())
        assert await publisher.flush()
        before = store.writes
        loop = asyncio.get_running_loop()
        started = loop.time()
        flaps = 0
        while (elapsed := loop.time() - started) < 1.5:
            flaps += 1
            present = [unit("a"), unit("b")] if flaps % 2 else [unit("a")]
            await publisher.publish(RESOURCE, present, set())
            await asyncio.sleep(1 / 90)  # the device's pace, not a wait for the publisher
        if not flaps % 2:  # end plugged in: a state the pool did not start in
            flaps += 1
            await publisher.publish(RESOURCE, [unit("a"), unit("b")], set())
        assert await publisher.flush()
        writes = store.writes - before
        last = {device_name(RESOURCE, "a"), device_name(RESOURCE, "b")}
        assert set(devices_of(await held(client, node_name))) == last
    assert flaps > 60, flaps
    assert 1 <= writes <= elapsed / MIN_WRITE_GAP + 2, (writes, flaps, elapsed)
