"""The /metrics, /healthz, /readyz HTTP server over real TCP sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from genericdp.httpserver import HttpServer, ListenError, Response, Route, run_http_server
from genericdp.metrics import Metrics
from genericdp.probes import Verdict, routes
from genericdp.settings import ListenAddress

LOCAL = ListenAddress("127.0.0.1", 0)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


def parse(raw: bytes) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(int(status_line.split(" ")[1]), headers, body)


async def send(port: int, raw: bytes, timeout: float = 5.0) -> Reply:  # noqa: ASYNC109
    """Send ``raw`` and read the reply up to the server's close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        async with asyncio.timeout(timeout):
            return parse(await reader.read())
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def get(port: int, path: str, method: str = "GET") -> Reply:
    return await send(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


@asynccontextmanager
async def started(route_map: Mapping[str, Route], **options: float) -> AsyncIterator[HttpServer]:
    """A server started on 127.0.0.1 and a free port."""
    server = HttpServer(route_map, **options)  # type: ignore[arg-type]
    await server.start(LOCAL)
    try:
        yield server
    finally:
        await server.close()


@asynccontextmanager
async def serving(route_map: Mapping[str, Route], **options: float) -> AsyncIterator[int]:
    """A started server's port."""
    async with started(route_map, **options) as server:
        ((_, port),) = server.addresses
        yield port


async def until_connections(server: HttpServer, count: int) -> None:
    """Wait until the server has ``count`` connections open; say what it had if not."""
    seen: list[int] = []
    try:
        async with asyncio.timeout(5):
            while server.connections != count:
                if not seen or seen[-1] != server.connections:
                    seen.append(server.connections)
                await asyncio.sleep(0.005)
    except TimeoutError:
        shown = [*seen[:10], "...", *seen[-10:]] if len(seen) > 20 else seen
        raise AssertionError(
            f"not {count} connections within 5 s; counts seen: {shown}, shed {server.shed}"
        ) from None


class Ready:
    """A /readyz verdict a test flips."""

    def __init__(self) -> None:
        self.ok = False

    def __call__(self) -> Verdict:
        return Verdict(self.ok, "ready" if self.ok else "not ready: example.com/x: waiting")


@pytest.fixture
async def port() -> AsyncIterator[int]:
    async with serving(routes(Metrics(), Ready())) as p:
        yield p


async def test_metrics_are_prometheus_text(port: int) -> None:
    """GET /metrics answers 200 in the Prometheus text format, which parses."""
    reply = await get(port, "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"] == CONTENT_TYPE_LATEST
    assert reply.headers["connection"] == "close"
    assert int(reply.headers["content-length"]) == len(reply.body)
    names = {f.name for f in text_string_to_metric_families(reply.body.decode())}
    assert "genericdp_build_info" in names
    assert "genericdp_config_reloads" in names


async def test_healthz_answers_ok(port: int) -> None:
    """/healthz is 200 "ok" as long as the loop answers."""
    reply = await get(port, "/healthz")
    assert (reply.status, reply.body) == (200, b"ok\n")
    assert reply.headers["content-type"].startswith("text/plain")


async def test_readyz_follows_the_verdict() -> None:
    """/readyz is 503 with the reason while not ready, then 200."""
    ready = Ready()
    async with serving(routes(Metrics(), ready)) as port:
        reply = await get(port, "/readyz")
        assert reply.status == 503
        assert b"example.com/x: waiting" in reply.body
        ready.ok = True
        assert (await get(port, "/readyz")).status == 200


async def test_query_string_is_ignored(port: int) -> None:
    """A probe URL with a query string still reaches its endpoint."""
    assert (await get(port, "/healthz?verbose=1")).status == 200


async def test_unknown_path_is_404(port: int) -> None:
    """A path we do not serve is 404."""
    reply = await get(port, "/nothing")
    assert reply.status == 404
    assert b"/nothing" in reply.body


async def test_other_methods_are_405(port: int) -> None:
    """POST (or any method but GET and HEAD) is 405 with an Allow header."""
    reply = await get(port, "/metrics", method="POST")
    assert reply.status == 405
    assert reply.headers["allow"] == "GET, HEAD"


async def test_head_has_headers_but_no_body(port: int) -> None:
    """HEAD answers like GET, Content-Length included, without a body."""
    reply = await get(port, "/healthz", method="HEAD")
    assert reply.status == 200
    assert reply.headers["content-length"] == "3"
    assert reply.body == b""


@pytest.mark.parametrize(
    "raw",
    [
        b"hello\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b"GET healthz HTTP/1.1\r\n\r\n",
        b"\x00\xff\r\n\r\n",
    ],
)
async def test_garbage_is_400(port: int, raw: bytes) -> None:
    """Something that is not an HTTP/1.x request line gets 400, and the server goes on."""
    assert (await send(port, raw)).status == 400
    assert (await get(port, "/healthz")).status == 200


async def test_client_closing_early_is_harmless(port: int) -> None:
    """A client that sends half a head and hangs up costs nothing."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metr")
    writer.close()
    await writer.wait_closed()
    assert (await get(port, "/healthz")).status == 200


async def test_oversized_head_is_431(port: int) -> None:
    """A request head over the cap is refused with 431 instead of being buffered."""
    raw = b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    reply = await send(port, raw)
    assert reply.status == 431


async def test_slow_client_is_dropped_without_blocking_others() -> None:
    """A client that never sends its head gets 408 after the read timeout; others are served."""
    async with started(routes(Metrics(), Ready()), read_timeout=1.0) as server:
        ((_, port),) = server.addresses
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await until_connections(server, 1)
            opened = loop.time()
            for _ in range(3):  # served while the slow one waits
                assert (await get(port, "/healthz")).status == 200
            assert server.connections == 1, "the slow client was dropped before the others"
            async with asyncio.timeout(5):
                reply = parse(await reader.read())
            assert reply.status == 408
            assert loop.time() - opened >= 0.9
            await until_connections(server, 0)
        finally:
            writer.close()
            await writer.wait_closed()


async def test_failing_handler_is_500_and_server_goes_on() -> None:
    """A handler that raises gives 500; the next request is served."""

    def broken() -> Response:
        raise RuntimeError("collector bug")

    async with serving({"/metrics": broken, "/ok": lambda: Response(200, b"ok")}) as port:
        assert (await get(port, "/metrics")).status == 500
        assert (await get(port, "/ok")).status == 200


async def test_past_the_cap_the_oldest_idle_connection_makes_room() -> None:
    """Past max_connections the oldest connection without a request goes; the new is served."""
    async with started({"/ok": lambda: Response(200, b"ok")}, max_connections=2) as server:
        ((_, port),) = server.addresses
        held = []
        try:
            for _ in range(2):
                held.append(await asyncio.open_connection("127.0.0.1", port))
                await until_connections(server, len(held))
            assert (await get(port, "/ok")).status == 200
            async with asyncio.timeout(5):
                assert await held[0][0].read() == b"", "the oldest idle one was dropped"
            assert server.shed == 1
            assert server.connections == 1, "the younger idle one is still open"
        finally:
            for _, w in held:
                w.close()
                with contextlib.suppress(ConnectionError):
                    await w.wait_closed()
        await until_connections(server, 0)


async def test_connections_busy_answering_are_not_shed() -> None:
    """A connection whose request is being answered keeps its slot; the new one is closed."""
    async with started(
        {"/ok": lambda: Response(200, b"x" * 32_000_000)}, max_connections=1
    ) as server:
        ((_, port),) = server.addresses
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:  # a response far bigger than the socket buffers, never read: stuck writing
            writer.write(b"GET /ok HTTP/1.1\r\n\r\n")
            await writer.drain()
            await until_connections(server, 1)
            late_reader, late_writer = await asyncio.open_connection("127.0.0.1", port)
            async with asyncio.timeout(5):
                assert await late_reader.read() == b""
            late_writer.close()
            assert server.shed == 0
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def test_close_ends_open_connections() -> None:
    """Closing the server ends a connection that is still waiting for its head."""
    server = HttpServer({}, read_timeout=60)
    await server.start(LOCAL)
    ((_, port),) = server.addresses
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        await until_connections(server, 1)
        async with asyncio.timeout(5):
            await server.close()
            assert await reader.read() == b""
        assert server.connections == 0
    finally:
        writer.close()
        await writer.wait_closed()


async def test_address_in_use_is_a_listen_error() -> None:
    """A second server on a taken port fails with ListenError naming the address."""
    async with serving({}) as port:
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1:{port}"):
            await HttpServer({}).start(ListenAddress("127.0.0.1", port))


async def test_run_http_server_serves_until_cancelled() -> None:
    """run_http_server reports where it listens, serves, and frees the port on cancel."""
    listening: asyncio.Future[list[tuple[str, int]]] = asyncio.Future()
    task = asyncio.create_task(
        run_http_server(
            LOCAL, {"/ok": lambda: Response(200, b"ok")}, on_listening=listening.set_result
        )
    )
    try:
        async with asyncio.timeout(5):
            ((_, port),) = await listening
        assert (await get(port, "/ok")).status == 200
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)


# -- floods ----------------------------------------------------------------------------


def _kubelet_probe(port: int) -> float:
    """GET /healthz as the kubelet does (another process: the request goes out at once)."""
    started_at = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
        sock.settimeout(max(0.001, 1.0 - (time.monotonic() - started_at)))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = b""
        while chunk := sock.recv(4096):
            raw += chunk
    assert parse(raw).status == 200, raw
    return time.monotonic() - started_at


async def _probe_times(port: int, rounds: int) -> list[float]:
    """How long /healthz takes, ``rounds`` times in a row; the kubelet's limit is 1 s."""
    times = []
    for _ in range(rounds):
        times.append(await asyncio.to_thread(_kubelet_probe, port))
        await asyncio.sleep(0.05)
    return times


@pytest.mark.parametrize("kind", ["silent", "dribble"], ids=["silent", "one-byte-a-second"])
async def test_healthz_answers_under_a_flood_of_slow_clients(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """96 slow clients that reconnect when dropped: /healthz still answers within 1 s, few logs."""
    async with started(routes(Metrics(), Ready())) as server:
        ((_, port),) = server.addresses
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.slow_clients", str(port), kind, "96"
        )
        try:
            await until_connections(server, 64)  # the cap: every slot taken by the flood
            times = await _probe_times(port, 20)
        finally:
            flood.kill()
            await flood.wait()
    assert max(times) < 1.0, times
    assert server.shed >= 20, "each probe made room by dropping an idle client"
    lines = [r for r in caplog.records if r.name == "genericdp.httpserver"]
    assert len(lines) <= 5, [r.getMessage() for r in lines]  # one burst per 10 s


async def test_reconnecting_clients_are_logged_a_bounded_number_of_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """80 clients reconnecting as fast as they can for 2 s: a few log lines, not thousands."""
    async with started(routes(Metrics(), Ready())) as server:  # 64 connections at most
        ((_, port),) = server.addresses
        flood = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.slow_clients", str(port), "silent", "80"
        )
        try:
            await until_connections(server, 64)  # the flood is there
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 2.0
            times = []
            while loop.time() < deadline:
                times += await _probe_times(port, 1)
        finally:
            flood.kill()
            await flood.wait()
    assert max(times) < 1.0, times
    assert server.shed > 100, server.shed
    lines = [r for r in caplog.records if r.name == "genericdp.httpserver"]
    assert len(lines) <= 5, len(lines)
