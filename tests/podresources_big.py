"""A PodResources server with a large answer, in a process of its own (so its work never
runs on the test's event loop): most of the answer is another plugin's devices, a small
tail changes at every List (a new pod each time, so no answer repeats the last), and
``ours`` holds ``ttyUSB0`` of ``example.com/serial`` while ``<socket>.held`` exists."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

OURS = "example.com/serial"
OTHER = "other.example.com/gpu"

_SERVER = r"""
import sys, time
from concurrent import futures
from pathlib import Path
import grpc
from genericdp.kubelet.api import podresources_pb2 as pr

socket, size = Path(sys.argv[1]), int(sys.argv[2])
def pod(n):
    one = pr.PodResources(name=f"pod-{n:06d}", namespace="tenant")
    for c in range(4):
        ids = [f"GPU-{n:06d}-{c}-{i:03d}-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" for i in range(100)]
        one.containers.add(name=f"c{c}").devices.add(resource_name=sys.argv[3], device_ids=ids)
    return one

base = pr.ListPodResourcesResponse(pod_resources=[pod(0)])
base.pod_resources.extend(pod(n) for n in range(1, size // base.ByteSize() + 1))
head = base.SerializeToString()
calls = 0

def answer(request, context):
    global calls
    calls += 1
    tail = pr.ListPodResourcesResponse()
    tick = tail.pod_resources.add(name=f"tick-{calls}", namespace="tenant")
    tick.containers.add(name="c").devices.add(resource_name=sys.argv[3], device_ids=[f"t{calls}"])
    if Path(str(socket) + ".held").exists():
        ours = tail.pod_resources.add(name="ours", namespace="default").containers.add(name="main")
        ours.devices.add(resource_name=sys.argv[4], device_ids=["ttyUSB0"])
    return head + tail.SerializeToString()  # repeated fields of two messages concatenate

handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
    "List": grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=None, response_serializer=lambda b: b),
})
server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                     options=[("grpc.max_send_message_length", 64 << 20)])
server.add_generic_rpc_handlers((handler,))
server.add_insecure_port(f"unix:{socket}")
server.start()
print(len(head), flush=True)
sys.stdin.read()  # until the test closes it
server.stop(0)
"""


@asynccontextmanager
async def big_server(socket: Path, *, size: int) -> AsyncIterator[int]:
    """Serve PodResources on ``socket`` with an answer of about ``size`` bytes; yields
    the answer's size."""
    with subprocess.Popen(  # noqa: ASYNC220 -- started once, read through a thread
        [sys.executable, "-c", _SERVER, str(socket), str(size), OTHER, OURS],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            line = await asyncio.to_thread(process.stdout.readline)
            assert line.strip().isdigit(), f"the PodResources server did not start: {line!r}"
            yield int(line)
        finally:
            process.stdin.close()  # the server's cue to stop
            await asyncio.to_thread(process.wait, 10)
