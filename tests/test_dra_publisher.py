"""SlicePublisher against a real kube-apiserver: publish, diff, takeover, withdraw, latency.

Each test uses a node name of its own (ResourceSlices are cluster-scoped),
so the tests share the session's API server without seeing each other.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra import kubeapi
from genericdp.dra.naming import DEFAULT_DRIVER, device_name
from genericdp.dra.publisher import SlicePublisher
from genericdp.dra.slices import MAX_DEVICES_PER_SLICE
from tests.apiserver import ApiServer, free_port
from tests.polling import eventually

RESOURCE = "example.com/serial"
_nodes = itertools.count()


def unit(uid: str, *, numa: int | None = None, serial: str | None = None) -> Unit:
    props = {"ID_SERIAL_SHORT": serial} if serial else {}
    node = DeviceNode(f"/dev/{uid}", f"/dev/{uid}", 188, 0, "tty")
    return Unit(uid, (node,), numa_node=numa, properties=props)


@pytest.fixture
def node_name() -> str:
    return f"node-{next(_nodes)}-{int(time.time() * 1000) % 100000}"


@pytest.fixture
async def client(apiserver: ApiServer) -> AsyncIterator[kubeapi.AsyncClient]:
    api = kubeapi.connect(apiserver.kubeconfig)
    try:
        yield api
    finally:
        await api.close()


async def held(client: kubeapi.AsyncClient, node: str) -> dict[str, dict[str, Any]]:
    return await kubeapi.list_slices(client, node=node, driver=DEFAULT_DRIVER)


def devices_of(objs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for obj in objs.values() for d in obj["spec"].get("devices") or []}


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
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
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
    await publisher.close()


async def test_only_changes_are_written_and_bursts_coalesce(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """The same units again write nothing; ten changes in a row become one write."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    units = [unit("a"), unit("b")]
    await publisher.publish(RESOURCE, units, set())
    assert await publisher.flush()
    before = publisher.writes
    await publisher.publish(RESOURCE, list(units), set())
    assert await publisher.flush()
    assert publisher.writes == before
    for i in range(10):
        await publisher.publish(RESOURCE, [*units, unit(f"c{i}")], set())
    assert await publisher.flush()
    assert publisher.writes == before + 1
    assert set(devices_of(await held(client, node_name))) == {
        device_name(RESOURCE, u) for u in ("a", "b", "c9")
    }
    await publisher.close()


async def test_unhealthy_devices_stay_listed_with_a_taint_and_healthy_false(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """The 1.36 API server keeps device taints: an unhealthy unit is NoSchedule, not gone."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    await publisher.publish(RESOURCE, [unit("a"), unit("b")], {"b"})
    assert await publisher.flush()
    found = devices_of(await held(client, node_name))
    b = found[device_name(RESOURCE, "b")]
    assert b["attributes"]["healthy"] == {"bool": False}
    assert [(t["key"], t["effect"]) for t in b["taints"]] == [
        (f"{DEFAULT_DRIVER}/unhealthy", "NoSchedule")
    ]
    assert "timeAdded" in b["taints"][0]  # filled in by the server, ignored when comparing
    writes = publisher.writes
    await publisher.publish(RESOURCE, [unit("a"), unit("b")], {"b"})
    assert await publisher.flush()
    assert publisher.writes == writes
    await publisher.publish(RESOURCE, [unit("a"), unit("b")], set())
    assert await publisher.flush()
    assert "taints" not in devices_of(await held(client, node_name))[device_name(RESOURCE, "b")]
    await publisher.close()


async def test_many_units_split_into_slices_of_one_generation(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """More units than a slice may hold: several slices, one pool, one generation, all counted."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    many = [unit(f"u{i:03}") for i in range(MAX_DEVICES_PER_SLICE * 2 + 1)]
    await publisher.publish(RESOURCE, many, {"u000"})
    await publisher.publish("example.com/other", [unit("x")], set())
    assert await publisher.flush()
    objs = await held(client, node_name)
    assert len(objs) == 4
    pools = {
        (o["spec"]["pool"]["generation"], o["spec"]["pool"]["resourceSliceCount"])
        for o in objs.values()
    }
    assert pools == {(1, 4)}
    assert len(devices_of(objs)) == len(many) + 1
    await publisher.publish(RESOURCE, many[:3], set())
    assert await publisher.flush()
    objs = await held(client, node_name)
    assert {
        (o["spec"]["pool"]["generation"], o["spec"]["pool"]["resourceSliceCount"])
        for o in objs.values()
    } == {(2, 2)}
    await publisher.close()


async def test_withdraw_deletes_the_resources_slices(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    await publisher.publish(RESOURCE, [unit("a")], set())
    await publisher.publish("example.com/other", [unit("x")], set())
    assert await publisher.flush()
    await publisher.withdraw("example.com/other")
    assert await publisher.flush()
    objs = await held(client, node_name)
    assert set(devices_of(objs)) == {device_name(RESOURCE, "a")}
    assert {o["spec"]["pool"]["resourceSliceCount"] for o in objs.values()} == {1}
    await publisher.close()


async def test_a_new_instance_takes_over_without_rewriting_and_removes_the_rest(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """A restart publishing the same units writes nothing; an unserved resource goes."""
    first = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await first.start()
    await first.publish(RESOURCE, [unit("a")], set())
    await first.publish("example.com/gone", [unit("g")], set())
    assert await first.flush()
    await first.close()
    kept = await held(client, node_name)

    second = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0.3)
    await second.start()
    await second.publish(RESOURCE, [unit("a")], set())
    assert await second.flush()
    after = await held(client, node_name)
    assert set(devices_of(after)) == {device_name(RESOURCE, "a")}
    assert second.writes == 2  # the kept slice with the new count, the gone one deleted
    await second.close()

    third = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0.3)
    await third.start()
    await third.publish(RESOURCE, [unit("a")], set())
    assert await third.flush()
    assert third.writes == 0
    still = await held(client, node_name)
    assert [o["metadata"]["resourceVersion"] for o in still.values()] == [
        o["metadata"]["resourceVersion"] for o in after.values()
    ]
    assert kept  # the first instance's slices were there to adopt
    await third.close()


async def test_the_takeover_waits_for_every_expected_resource(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """A resource slower to scan keeps its slice (never deleted and made again); one write."""
    first = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await first.start()
    for name in ("example.com/a", "example.com/b", "example.com/gone"):
        await first.publish(name, [unit("u")], set())
    assert await first.flush()
    await first.close()
    before = await held(client, node_name)

    second = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=60)
    second.expect("example.com/a")
    second.expect("example.com/b")
    await second.start()
    await second.publish("example.com/a", [unit("u")], set())
    # b has not published: nothing is written, however long that takes (up to the grace).
    assert not await second.flush(timeout=0.5)
    assert await held(client, node_name) == before
    await second.publish("example.com/b", [unit("u")], set())
    assert await second.flush()
    after = await held(client, node_name)
    assert second.writes == 3  # a and b with the new count, gone deleted
    uids = {name: obj["metadata"]["uid"] for name, obj in after.items()}
    assert uids == {name: before[name]["metadata"]["uid"] for name in after}
    assert len(after) == 2
    assert {obj["spec"]["pool"]["generation"] for obj in after.values()} == {2}
    await second.close()


async def test_a_resource_that_never_publishes_holds_the_takeover_only_for_the_grace(
    client: kubeapi.AsyncClient, node_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``adopt_grace`` the first write goes ahead, and says which resource it gave up on."""
    first = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await first.start()
    await first.publish("example.com/a", [unit("u")], set())
    await first.publish("example.com/stuck", [unit("u")], set())
    assert await first.flush()
    await first.close()

    second = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0.3)
    second.expect("example.com/a")
    second.expect("example.com/stuck")
    with caplog.at_level(logging.INFO, "genericdp.dra.publisher"):
        await second.start()
        await second.publish("example.com/a", [unit("u")], set())
        assert await second.flush()
    assert set(devices_of(await held(client, node_name))) == {device_name("example.com/a", "u")}
    assert any("without waiting longer for example.com/stuck" in m for m in caplog.messages)
    await second.close()


async def test_someone_elses_edit_is_a_conflict_that_is_retried(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    """A slice changed behind the publisher's back: the replace conflicts; it lists and wins."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
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
    await publisher.close()


async def test_slice_update_latency_is_under_a_second(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """From publish to the change readable from the API server (docs/dra.md quotes the numbers)."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    await publisher.publish(RESOURCE, [unit("a")], set())
    assert await publisher.flush()
    latencies = []
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
    await publisher.close()


async def test_an_unreachable_api_server_is_logged_and_retried_never_raised(
    caplog: pytest.LogCaptureFixture, apiserver: ApiServer, tmp_path: Any
) -> None:
    """Nothing listens: publish returns, the writer warns and keeps trying, close returns."""
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(
        apiserver.kubeconfig.read_text().replace(apiserver.url, f"https://127.0.0.1:{free_port()}")
    )
    api = kubeapi.connect(dead)
    publisher = SlicePublisher(kubeapi.ApiSlices(api, node="nowhere"), adopt_grace=0)
    with caplog.at_level(logging.WARNING, "genericdp.dra.publisher"):
        await publisher.start()
        await publisher.publish(RESOURCE, [unit("a")], set())
        await eventually(
            lambda: any("could not write the ResourceSlices" in r.message for r in caplog.records),
            "the warning about the unreachable API server",
        )
        assert not await publisher.flush(timeout=0.3)
        await publisher.close()
    await api.close()


async def test_slices_deleted_by_someone_else_come_back(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    """The kubelet deletes a node's slices when it starts: the watch notices, and rewrites."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    await publisher.publish(RESOURCE, [unit("a")], set())
    assert await publisher.flush()
    apiserver.kubectl("delete", "resourceslices", f"--field-selector=spec.nodeName={node_name}")
    await wait_for(
        client,
        node_name,
        lambda state: set(devices_of(state)) == {device_name(RESOURCE, "a")},
        "the deleted slice written again",
    )
    await publisher.close()


async def test_a_tampered_slice_is_put_back_and_a_relabelled_one_is_left_alone(
    client: kubeapi.AsyncClient, node_name: str, apiserver: ApiServer
) -> None:
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    await publisher.publish(RESOURCE, [unit("a")], set())
    assert await publisher.flush()
    name = next(iter(await held(client, node_name)))
    writes = publisher.writes
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
    assert publisher.writes == writes + 1
    await publisher.close()


async def test_two_resources_whose_names_read_alike_are_both_published(
    client: kubeapi.AsyncClient, node_name: str
) -> None:
    """``a.com/x.y`` and ``a.com.x/y`` (one name once '/' is '.') get a slice each and
    every device of both is in the pool."""
    publisher = SlicePublisher(kubeapi.ApiSlices(client, node=node_name), adopt_grace=0)
    await publisher.start()
    try:
        await publisher.publish("a.com/x.y", [unit("a")], set())
        await publisher.publish("a.com.x/y", [unit("b")], set())
        assert await publisher.flush()
        objs = await held(client, node_name)
        assert len(objs) == 2
        assert set(devices_of(objs)) == {
            device_name("a.com/x.y", "a"),
            device_name("a.com.x/y", "b"),
        }
    finally:
        await publisher.close()
