"""PodResources answers as the daemon takes them: repeated bytes cost no parsing, a large
answer costs the event loop next to nothing, and IDs a peer sends never shape a log line."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from genericdp.deviceplugin.poller import ReleasePoller
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.grpcservices import service_handler
from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.kubelet.podresources import PodResourcesLister
from genericdp.logsetup import TextFormatter
from genericdp.runtime.owed import Release
from genericdp.unixgrpc import serve
from tests.podresources_big import OURS, big_server
from tests.polling import eventually
from tests.runtime_harness import ScriptedDiscovery, config, running, unit


def _handlers(lister: FixedLister) -> list[grpc.GenericRpcHandler[Any, Any]]:
    return [service_handler(pr.DESCRIPTOR.services_by_name["PodResourcesLister"], lister)]


class FixedLister:
    """A PodResources server whose List answer the test sets."""

    def __init__(self, answer: pr.ListPodResourcesResponse) -> None:
        self.answer = answer
        self.calls = 0

    async def List(
        self,
        request: pr.ListPodResourcesRequest,  # noqa: ARG002 -- the gRPC method's signature
        context: grpc.aio.ServicerContext[object, object],  # noqa: ARG002 -- the gRPC method's signature
    ) -> pr.ListPodResourcesResponse:
        self.calls += 1
        return self.answer


def holding(resource: str, *ids: str, pod: str = "p") -> pr.ListPodResourcesResponse:
    answer = pr.ListPodResourcesResponse()
    container = answer.pod_resources.add(name=pod, namespace="default").containers.add(name="c")
    container.devices.add(resource_name=resource, device_ids=list(ids))
    return answer


async def test_a_repeated_answer_is_the_same_answer_and_a_new_one_is_parsed(
    tmp_path: Path,
) -> None:
    """The same bytes give the very tuple of the last answer; new bytes a new one."""
    lister = FixedLister(holding("example.com/x", "a", "b"))
    socket = tmp_path / "pr.sock"
    server = await serve(
        socket,
        _handlers(lister),
        what="PodResources",
    )
    client = PodResourcesLister()
    try:
        first = await client(socket)
        again = await client(socket)
        assert again is first
        assert [p.device_ids for p in first] == [("a", "b")]
        lister.answer = holding("example.com/x", "a")
        changed = await client(socket)
        assert changed is not first
        assert [p.device_ids for p in changed] == [("a",)]
    finally:
        await client.close()
        await server.stop(None)


async def test_an_id_with_a_newline_from_podresources_yields_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A held ID with a newline in it (a unit we do not have) is logged on one line."""
    name = "example.com/x"
    hostile = "ghost\n2026-12-02T00:00:00.000Z error   genericdp: forged"
    lister = FixedLister(holding(name, hostile))
    discovery = ScriptedDiscovery(units={name: [unit("u0")]})
    cfg = config(f"resources:\n- name: {name}\n  match: [glob: /dev/u*]\n")
    caplog.set_level(logging.INFO)
    async with running(tmp_path, cfg, discover=discovery, pod_resources_poll_interval=0.1) as run:
        socket = run.settings.pod_resources_socket
        server = await serve(
            socket,
            _handlers(lister),
            what="PodResources",
            make_dir=True,
        )
        try:
            await run.registered([name], timeout=30)
            await eventually(
                lambda: any("forged" in r.getMessage() for r in caplog.records),
                "the hostile ID logged",
                timeout=30,
            )
        finally:
            await server.stop(None)
    formatter = TextFormatter()
    lines = [formatter.format(r) for r in caplog.records if "forged" in r.getMessage()]
    assert lines
    assert all(line.count("\n") == 0 for line in lines), lines


async def test_a_large_answer_costs_the_event_loop_next_to_nothing(tmp_path: Path) -> None:
    """A 14.7 MiB answer, new at every List (so no shortcut for repeated bytes), mostly
    another plugin's devices: the loop thread's CPU time per poll stays far below what
    parsing or flattening the answer on it costs (1.2-2.4 s each poll before). CPU time
    of the loop thread, not wall time: a busy machine stretches waits, not that. The
    holds of our resource are still seen and released."""
    socket = tmp_path / "pr.sock"
    released: list[Release] = []
    tracker, lister = UsageTracker(), PodResourcesLister()
    poller = ReleasePoller(
        socket,
        tracker,
        released.extend,
        interval=1.0,
        list_pods=lister,
        timeout=60,
        resources=lambda: {OURS},
    )
    held = Path(f"{socket}.held")
    costs = []
    async with big_server(socket, size=int(14.7 * 2**20)) as size:
        assert size >= 14.7 * 2**20
        await asyncio.to_thread(held.touch)
        for step in ("held", "held", "released", "released"):
            if step == "released":
                await asyncio.to_thread(held.unlink, missing_ok=True)
            before = time.thread_time()
            assert await poller.poll()
            costs.append(time.thread_time() - before)
            assert tracker.in_use(OURS) == ({"ttyUSB0"} if step == "held" else set())
        await lister.close()
    assert max(costs) < 0.15, f"loop CPU per poll: {[round(c, 3) for c in costs]}"
    assert released == [Release(OURS, "ttyUSB0", ("ttyUSB0",))]
    assert tracker.snapshot().keys() <= {OURS}
