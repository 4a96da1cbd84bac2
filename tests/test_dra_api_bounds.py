"""The publisher's and the Node watch's requests against a hostile API server on loopback
(``tests/ending_api.py``): a list trickled for ever ends at its deadline and is retried,
a watch that goes silent past its timeout is closed and listed again, and a watch line
of 64 MiB is dropped after the bound, without holding it in memory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from genericdp.aio import Backoff, TaskSet
from genericdp.kube import client as kubeapi
from genericdp.kube.listwatch import BrokenWatchError, ListWatch
from genericdp.kube.watchlines import MAX_EVENT_BYTES, lines
from genericdp.kubeletplugin.apislices import ApiSlices
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.kubeletplugin.slicewatch import SliceWatch
from genericdp.nodelabels.nodewatch import NodeWatch
from tests.ending_api import LONG_LINE, EndingServer, kubeconfig
from tests.polling import eventually

NODE = "hostile-node"


@contextlib.asynccontextmanager
async def connected(server: EndingServer, tmp_path: Path) -> AsyncIterator[kubeapi.AsyncClient]:
    """A client of ``server``, which runs while it is in use."""
    async with server as url:
        client = kubeapi.connect(kubeconfig(tmp_path / "kubeconfig", url))
        try:
            yield client
        finally:
            await client.close()


def kinds(server: EndingServer) -> list[str]:
    return ["watch" if "watch=true" in p else "list" for p in server.paths]


async def test_a_trickled_slice_list_ends_at_its_deadline_and_the_publisher_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A list answered a byte at a time for ever fails after the deadline, saying what and
    after how long, and is retried with backoff; once the server answers, the pool is
    written and watched."""
    server = EndingServer(trickle=True)
    async with connected(server, tmp_path) as client:
        store = ApiSlices(client, node=NODE, deadline=0.5)
        publisher = SlicePublisher(store, adopt_grace=0)
        with caplog.at_level(logging.INFO, "genericdp.kubeletplugin"):
            await publisher.start()
            try:
                await eventually(lambda: len(server.requests) >= 2, "a list retried")
                assert not await publisher.flush(0.1)
                server.trickle = False
                assert await publisher.flush(10)
                await eventually(lambda: "watch" in kinds(server), "the watch opened")
            finally:
                await publisher.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        "listing the ResourceSlices of node hostile-node: the API server did not answer"
        " within 0.5s" in w
        for w in warnings
    ), warnings
    assert any("written again after" in r.getMessage() for r in caplog.records)


async def test_a_trickled_node_list_ends_at_its_deadline(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Node watch's list is bounded the same way: it fails, is logged and retried,
    and the labels come once the server answers."""
    server = EndingServer(trickle=True)
    told: list[object] = []

    async def on_labels(labels: object) -> None:
        told.append(labels)

    async with connected(server, tmp_path) as client:
        watch = NodeWatch(client, NODE, on_labels, Backoff(initial=0.1, maximum=0.2), deadline=0.5)
        tasks = TaskSet()
        with caplog.at_level(logging.INFO, "genericdp.dra"):
            tasks.spawn("node-watch", watch.run)
            try:
                await eventually(lambda: len(server.requests) >= 2, "a list retried")
                assert told == []
                server.trickle = False
                await eventually(lambda: told == [None], "the (missing) Node told")
            finally:
                await tasks.stop()
    assert any(
        "listing Node hostile-node: the API server did not answer within 0.5s" in r.getMessage()
        for r in caplog.records
    )


def slice_watch(
    client: kubeapi.AsyncClient, *, watch_seconds: int = 300, margin: float = 30.0
) -> ListWatch:
    """The publisher's watch of the node's slices, holding nothing, with a short backoff."""
    source = SliceWatch(ApiSlices(client, node=NODE), held=dict, stale=lambda: None)
    backoff = Backoff(initial=0.1, maximum=0.2)
    return ListWatch("the slices", source, backoff, watch_seconds=watch_seconds, margin=margin)


async def test_a_watch_that_goes_silent_is_closed_past_its_timeout_and_listed_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A watch answered with headers and then nothing is closed once its timeoutSeconds and
    the margin have passed, and the slices are listed again before the next watch."""
    server = EndingServer(silent=1)
    async with connected(server, tmp_path) as client:
        watch = slice_watch(client, watch_seconds=1, margin=0.5)
        tasks = TaskSet()
        with caplog.at_level(logging.INFO, "genericdp.kubeletplugin"):
            tasks.spawn("slice-watch", watch.run)
            try:
                await eventually(lambda: kinds(server)[:4] == ["list", "watch", "list", "watch"])
            finally:
                await tasks.stop()
    asked = parse_qs(urlsplit(server.paths[1]).query)["timeoutSeconds"]
    seconds = int(asked[0])  # 1 s jittered by a tenth, rounded up: 1 or 2
    times = [at for at, _ in server.requests]
    assert times[2] - times[1] >= seconds + 0.5
    assert watch.restarts["failed"] >= 1
    assert any(
        f"kept the watch open past its {seconds}s timeout and a 0.5s margin" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )


async def test_a_watch_line_over_the_bound_drops_the_stream_in_bounded_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A watch event of 64 MiB without a newline: the stream is dropped once the line
    passes the bound, said with the size, and the slices listed again; what was
    buffered stays near the bound, never the line."""
    server = EndingServer(long_line=1)
    async with connected(server, tmp_path) as client:
        watch = slice_watch(client)
        tasks = TaskSet()
        tracemalloc.start()
        try:
            with caplog.at_level(logging.INFO, "genericdp.kubeletplugin"):
                tasks.spawn("slice-watch", watch.run)
                try:
                    await eventually(
                        lambda: kinds(server)[:4] == ["list", "watch", "list", "watch"],
                        timeout=60,
                    )
                finally:
                    await tasks.stop()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 3 * MAX_EVENT_BYTES, peak
    assert server.long_sent < LONG_LINE
    assert any(
        f"a watch event longer than {MAX_EVENT_BYTES} bytes" in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
    )


async def chunked(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await asyncio.sleep(0)
        yield chunk


@pytest.mark.parametrize("line", [b"", b"{}", b"xyz"])
async def test_the_line_reader_splits_and_joins_lines_across_chunks(line: bytes) -> None:
    """Lines split across chunks, several in one chunk, and a last one without a newline."""
    stream = chunked(b"a", b"b\nc", b"\n\nde", line, b"\nf")
    got = [bytes(x) async for x in lines(stream, what="x", limit=8)]
    assert got == [b"ab", b"c", b"", b"de" + line, b"f"]


@pytest.mark.parametrize(
    "chunks",
    [(b"123456789",), (b"1234", b"56789\n"), (b"ok\n12345", b"6789")],
    ids=["in one chunk", "across chunks", "after a line"],
)
async def test_a_line_over_the_limit_is_a_broken_watch(chunks: tuple[bytes, ...]) -> None:
    """A line of 9 bytes against a limit of 8 breaks the stream, with the size; exactly 8 passes."""
    with pytest.raises(BrokenWatchError, match=r"x: a watch event longer than 8 bytes"):
        async for _ in lines(chunked(*chunks), what="x", limit=8):
            pass
    assert [bytes(x) async for x in lines(chunked(b"1234", b"5678"), what="x", limit=8)] == [
        b"12345678"
    ]
