"""Every API answer but a watch's is bounded as it is read (``kube/answersize.py``): a
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

from genericdp.deviceclasses.api import ClassApi
from genericdp.kube import client as kubeapi
from genericdp.kube.answersize import LIST_PAGE, MAX_ANSWER_BYTES, MAX_ANSWER_VALUES
from genericdp.kubeletplugin.apislices import ApiSlices, as_slice
from genericdp.kubeletplugin.naming import DEFAULT_DRIVER
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
        store = ApiSlices(client, node="n")
        failure: list[kubeapi.ApiRequestError] = []

        async def listing() -> None:
            with pytest.raises(kubeapi.ApiRequestError) as caught:
                await store.list()
            failure.append(caught.value)

        peak = await within_memory(listing)
    message = str(failure[0])
    assert message.startswith("listing the ResourceSlices of node n: "), message
    assert f"more than {MAX_ANSWER_BYTES} bytes decoded: not read further" in message
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
    assert f"more than {MAX_ANSWER_BYTES} bytes decoded" in str(caught.value)
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
            await ApiSlices(client, node="n").list()
    assert len(server.targets) == kubeapi.MAX_LIST_OBJECTS // LIST_PAGE + 1


async def test_the_real_api_server_answers_a_node_of_many_slices_in_pages(
    client: kubeapi.AsyncClient,
) -> None:
    """250 slices of one node on the real kube-apiserver: listed whole, in three pages
    of at most ``LIST_PAGE``, with the first page's resourceVersion."""
    node = fresh_node("paged")
    for i in range(250):
        await client.create(
            as_slice(
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
    store = ApiSlices(client, node=node)
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


def paged(page_bytes: int, count: int, path_kind: str = "") -> Callable[[str], Answer]:
    """``count`` pages, each one object holding a string of ``page_bytes``, chained by
    continue tokens: every page well under one answer's bound."""

    def answer(target: str) -> Answer:
        query = parse_qs(urlsplit(target).query)
        page = int(query.get("continue", ["0"])[0])
        token = f',"continue":"{page + 1}"' if page + 1 < count else ""
        head = (
            b'{"metadata":{"resourceVersion":"7"%s},"items":[{%s"metadata":{"name":"o%d"},"x":"'
            % (token.encode(), path_kind.encode(), page)
        )
        return {}, _chain(_repeat(head, b"y" * _CHUNK, page_bytes), _once(b'"}]}'))

    return answer


async def _chain(*parts: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        async for chunk in part:
            yield chunk


async def test_a_list_is_one_budget_over_all_its_pages(tmp_path: Path) -> None:
    """Six pages of 10 MiB, each far under an answer's bound: a list keeps every object,
    so its pages share one budget and the list fails at the fourth page, in memory
    near one bound (the old bound per page let 32 pages of 20 MiB hold 600 MiB)."""
    page = 10 * _CHUNK
    async with serving(paged(page, 6), tmp_path) as (server, client):
        failure: list[kubeapi.ApiRequestError] = []

        async def listing() -> None:
            with pytest.raises(kubeapi.ApiRequestError) as caught:
                await ApiSlices(client, node="n").list()
            failure.append(caught.value)

        peak = await within_memory(listing)
    message = str(failure[0])
    assert message.startswith("listing the ResourceSlices of node n: no whole answer: "), message
    assert f"more than {MAX_ANSWER_BYTES} bytes decoded over its pages" in message
    assert len(server.targets) == MAX_ANSWER_BYTES // page + 1
    assert peak < 2 * MAX_ANSWER_BYTES, peak


async def test_the_device_class_list_is_one_budget_too(tmp_path: Path) -> None:
    """The reconciler keeps every DeviceClass: six pages of 10 MiB fail as one list
    (lightkube's paged list kept them all: 446-506 MiB against the chart's 192 Mi)."""
    async with serving(paged(10 * _CHUNK, 6), tmp_path) as (server, client):
        with pytest.raises(kubeapi.ApiRequestError) as caught:
            await ClassApi(client, driver=DEFAULT_DRIVER).classes()
    assert str(caught.value).startswith("listing the DeviceClasses: no whole answer: ")
    assert "bytes decoded over its pages" in str(caught.value)
    assert all(t.startswith("/apis/resource.k8s.io/v1/deviceclasses?") for t in server.targets)


async def test_the_reconcilers_slice_pages_are_not_kept(tmp_path: Path) -> None:
    """Our driver's slices over the cluster are many and only their resource names are
    kept: six pages of 10 MiB are read page by page, each within its own budget."""
    resource = '"spec":{"devices":[{"attributes":{"resource":{"string":"gpu"}}}]},'
    async with serving(paged(10 * _CHUNK, 6, resource), tmp_path) as (server, client):
        found = await ClassApi(client, driver=DEFAULT_DRIVER).published_resources()
    assert found == {"gpu"}
    assert len(server.targets) == 6


def wide(text: bytes, where: str) -> Callable[[str], Answer]:
    """A list of one object whose string of 31 MiB holds ``text`` at ``where``."""
    size = 31 * _CHUNK

    def answer(_target: str) -> Answer:
        head = b'{"metadata":{},"items":[{"metadata":{"name":"o"},"x":"'
        if where == "start":
            return {}, _chain(_repeat(head + text, b"y" * _CHUNK, size), _once(b'"}]}'))
        return {}, _chain(_repeat(head, b"y" * _CHUNK, size), _once(text + b'"}]}'))

    return answer


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("\N{GRINNING FACE}".encode(), "start"),
        ("\N{GRINNING FACE}".encode(), "end"),
        (b"\\ud83d\\ude00", "end"),
    ],
    ids=["emoji-first", "emoji-last", "escaped-surrogates"],
)
async def test_an_answer_is_bounded_by_what_it_decodes_to(
    tmp_path: Path, text: bytes, where: str
) -> None:
    """31 MiB of text with one character past U+FFFF (raw or escaped) decodes and parses
    at 4 bytes a character (peak 393 MiB where 75 was measured for ASCII): refused as
    more than the bound decoded, before it is parsed, in memory near the bytes read."""
    async with serving(wide(text, where), tmp_path) as (server, client):
        failure: list[kubeapi.ApiRequestError] = []

        async def listing() -> None:
            with pytest.raises(kubeapi.ApiRequestError) as caught:
                await ApiSlices(client, node="n").list()
            failure.append(caught.value)

        peak = await within_memory(listing)
    assert f"more than {MAX_ANSWER_BYTES} bytes decoded: not read further" in str(failure[0])
    if where == "start":
        assert server.sent < MAX_ANSWER_BYTES // 4 + BUFFERED
    assert peak < 2 * MAX_ANSWER_BYTES, peak


async def test_text_of_any_script_within_the_bound_is_read_whole(tmp_path: Path) -> None:
    """Characters of every width, raw and escaped, come back as sent."""
    values = ["\u00e9t\u00e9", "\u6f22\u5b57", "\N{GRINNING FACE}", "a&b<c>"]
    items = [{"metadata": {"name": v}} for v in values]
    raw = json.dumps({"metadata": {}, "items": items}, ensure_ascii=False)
    escaped = raw.replace("&", "\\u0026")

    async with serving(lambda _t: ({}, _once(escaped.encode())), tmp_path) as (_s, client):
        items, _ = await kubeapi.list_objects(kubeapi.http_of(client), kubeapi.SLICES, {}, "x")
    assert [item["metadata"]["name"] for item in items] == values
