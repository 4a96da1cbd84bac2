"""Every API answer but a watch's is bounded as it is read (``dra/answersize.py``): a
hostile server on loopback answering a list or a get of 128 MiB, of two million tiny
JSON values, compressed, or with pages that never end, is dropped with an error that
says what and how much, in bounded memory; the real kube-apiserver's lists come in
pages and whole."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from genericdp.dra import kubeapi
from genericdp.dra.answersize import LIST_PAGE, MAX_ANSWER_BYTES, MAX_ANSWER_VALUES
from genericdp.dra.naming import DEFAULT_DRIVER
from tests.dra_apislices import fresh_node
from tests.ending_api import kubeconfig

BIG = 128 * 1024 * 1024  # bytes a hostile answer would send
# What the server may have written past what the client read when it hangs up: the
# loopback socket's buffers on both sides (a few MiB each, autotuned) and the
# stream writer's own.
BUFFERED = 32 * 1024 * 1024
_CHUNK = 1024 * 1024

# What the server sends for one request target: headers beside its own and the
# body's chunks (sent chunked, with no length).
Answer = tuple[dict[str, str], AsyncIterator[bytes]]


async def _repeat(head: bytes, piece: bytes, total: int) -> AsyncIterator[bytes]:
    yield head
    for _ in range(total // len(piece)):
        yield piece


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


class BigServer:
    """An HTTP server whose answers come from ``answer(target)``; it counts the body
    bytes it got to write (``sent``) and every request target (``targets``)."""

    def __init__(self, answer: Callable[[str], Answer]) -> None:
        self.answer = answer
        self.sent = 0
        self.targets: list[str] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request = (await reader.readuntil(b"\r\n\r\n")).decode()
                target = request.split()[1]
                self.targets.append(target)
                headers, body = self.answer(target)
                lines = [
                    "HTTP/1.1 200 OK",
                    "Content-Type: application/json",
                    "Transfer-Encoding: chunked",
                ]
                lines += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
                async for chunk in body:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                    self.sent += len(chunk)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@contextlib.asynccontextmanager
async def serving(
    answer: Callable[[str], Answer], tmp_path: Path
) -> AsyncIterator[tuple[BigServer, kubeapi.AsyncClient]]:
    server = BigServer(answer)
    async with server as url:
        client = kubeapi.connect(kubeconfig(tmp_path / "kubeconfig", url))
        try:
            yield server, client
        finally:
            await client.close()


def huge_list(_target: str) -> Answer:
    """A list whose one item holds a string of 128 MiB."""
    return {}, _repeat(b'{"metadata":{},"items":[{"x":"', b"y" * _CHUNK, BIG)


def tiny_values(_target: str) -> Answer:
    """Two million empty lists in 4 MiB: far under the byte bound."""
    return {}, _repeat(b'{"items":[', b"[]," * (_CHUNK // 3), 2 * MAX_ANSWER_VALUES * 3)


async def within_memory(work: Callable[[], object]) -> int:
    """The peak bytes traced while ``work()`` (awaited) ran."""
    tracemalloc.start()
    try:
        result = work()
        if asyncio.iscoroutine(result):
            await result
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_a_list_of_128_mib_is_dropped_at_the_bound_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A node's slice list of 128 MiB: an error naming the bound after about 32 MiB
    read, and memory never near the answer's size."""
    async with serving(huge_list, tmp_path) as (server, client):
        store = kubeapi.ApiSlices(client, node="n")
        failure: list[kubeapi.ApiRequestError] = []

        async def listing() -> None:
            with pytest.raises(kubeapi.ApiRequestError) as caught:
                await store.list()
            failure.append(caught.value)

        peak = await within_memory(listing)
    message = str(failure[0])
    assert message.startswith("listing the ResourceSlices of node n: "), message
    assert f"an answer of more than {MAX_ANSWER_BYTES} bytes: not read further" in message
    assert server.sent < MAX_ANSWER_BYTES + BUFFERED < BIG
    assert peak < 3 * MAX_ANSWER_BYTES, peak


async def test_an_answer_of_two_million_tiny_values_is_dropped_before_it_is_parsed(
    tmp_path: Path,
) -> None:
    """6 MiB of ``[]``: json.loads would build two million lists (some 70 MiB); the
    answer ends once its values pass the bound, said with the count."""
    async with serving(tiny_values, tmp_path) as (_server, client):
        http = kubeapi.http_of(client)
        with pytest.raises(kubeapi.ApiRequestError, match=f"more than {MAX_ANSWER_VALUES} JSON"):
            await kubeapi.list_objects(http, kubeapi.SLICES, {}, "the slices")


async def test_a_get_through_lightkube_is_bounded_too(tmp_path: Path) -> None:
    """A ResourceClaim read (lightkube's get) of 128 MiB fails as ApiRequestError, not as
    an httpx error or an out-of-memory kill."""
    async with serving(huge_list, tmp_path) as (server, client):
        with pytest.raises(kubeapi.ApiRequestError) as caught:
            await kubeapi.get_claim(client, "ns", "claim")
    assert str(caught.value).startswith("ResourceClaim ns/claim: no whole answer: GET ")
    assert f"more than {MAX_ANSWER_BYTES} bytes" in str(caught.value)
    assert server.sent < MAX_ANSWER_BYTES + BUFFERED < BIG


async def test_a_compressed_answer_is_refused_unread(tmp_path: Path) -> None:
    """Answers are asked for unencoded; a gzip one (a few MiB could inflate to
    gigabytes) is refused before its body is read."""

    def zipped(_target: str) -> Answer:
        body = gzip.compress(json.dumps({"metadata": {}, "items": []}).encode())
        return {"Content-Encoding": "gzip"}, _once(body)

    async with serving(zipped, tmp_path) as (_server, client):
        http = kubeapi.http_of(client)
        assert http.headers["Accept-Encoding"] == "identity"
        with pytest.raises(kubeapi.ApiRequestError, match="an answer encoded gzip, asked for none"):
            await kubeapi.list_objects(http, kubeapi.SLICES, {}, "the slices")


async def test_a_declared_length_over_the_bound_is_refused_before_reading(
    tmp_path: Path,
) -> None:
    """A Content-Length over the bound is refused at the headers."""
    reader_done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1073741824\r\n\r\n{"
        )
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client hangs up
        reader_done.set()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = kubeapi.connect(kubeconfig(tmp_path / "kubeconfig", url))
    try:
        with pytest.raises(kubeapi.ApiRequestError, match="an answer of 1073741824 bytes"):
            await kubeapi.list_objects(kubeapi.http_of(client), "/api/v1/nodes", {}, "Node n")
        await asyncio.wait_for(reader_done.wait(), 10)  # the connection was closed
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


async def test_pages_that_never_end_stop_at_the_object_bound(tmp_path: Path) -> None:
    """Each page a hundred objects and a continue token, for ever: the list stops with
    an error once it holds more than ``MAX_LIST_OBJECTS``."""

    def endless(target: str) -> Answer:
        query = parse_qs(urlsplit(target).query)
        assert query["limit"] == [str(LIST_PAGE)]
        page = int(query.get("continue", ["0"])[0])
        body = {
            "metadata": {"resourceVersion": "7", "continue": str(page + 1)},
            "items": [{"metadata": {"name": f"s{page}-{i}"}} for i in range(LIST_PAGE)],
        }
        return {}, _once(json.dumps(body).encode())

    async with serving(endless, tmp_path) as (server, client):
        with pytest.raises(
            kubeapi.ApiRequestError, match=f"more than {kubeapi.MAX_LIST_OBJECTS} objects"
        ):
            await kubeapi.ApiSlices(client, node="n").list()
    assert len(server.targets) == kubeapi.MAX_LIST_OBJECTS // LIST_PAGE + 1


async def test_the_real_api_server_answers_a_node_of_many_slices_in_pages(
    client: kubeapi.AsyncClient,
) -> None:
    """250 slices of one node on the real kube-apiserver: listed whole, in three pages
    of at most ``LIST_PAGE``, with the first page's resourceVersion."""
    node = fresh_node("paged")
    for i in range(250):
        await client.create(
            kubeapi.as_slice(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{i}"},
                    "spec": {
                        "driver": DEFAULT_DRIVER,
                        "nodeName": node,
                        "pool": {"name": f"{node}-{i}", "generation": 1, "resourceSliceCount": 1},
                        "devices": [],
                    },
                }
            )
        )
    http = kubeapi.http_of(client)
    pages: list[str] = []

    async def count(request: object) -> None:
        pages.append(str(getattr(request, "url", "")))

    http.event_hooks = {**http.event_hooks, "request": [count]}
    store = kubeapi.ApiSlices(client, node=node)
    try:
        listing = await store.list()
    finally:
        http.event_hooks = {**http.event_hooks, "request": []}
        for i in range(250):
            await store.delete(f"{node}-{i}")
    assert sorted(listing.slices) == sorted(f"{node}-{i}" for i in range(250))
    assert len(pages) == 3, pages
    assert all(f"limit={LIST_PAGE}" in p for p in pages)
    assert "continue=" in pages[1]
    assert "continue=" in pages[2]
    assert listing.version.isdigit()
