"""A tiny HTTP/1.1 server for /metrics, /healthz and /readyz, on the daemon's loop (an
answer proves the loop is not stuck); its limits and why: docs/contributing/architecture.md,
"Observability".
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import sys
import termios
from collections.abc import Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol, SupportsIndex

from genericdp.errors import GenericdpError
from genericdp.logsetup import RateLimitedLog

log = logging.getLogger(__name__)

# Seconds for the request head. The kubelet and Prometheus send it in one
# packet at once; the probes of deploy/ wait 3 s for the whole answer.
READ_TIMEOUT = 2.0
WRITE_TIMEOUT = 5.0  # seconds for a client to take the response
MAX_HEAD = 8 * 1024  # bytes of request line and headers
MAX_CONNECTIONS = 64
_END_OF_HEAD = b"\r\n\r\n"
_METHODS = ("GET", "HEAD")
TEXT = "text/plain; charset=utf-8"


class Address(Protocol):
    """Where to listen (``settings.ListenAddress``); ``host`` None means every interface."""

    @property
    def host(self) -> str | None: ...

    @property
    def port(self) -> int: ...


class ListenError(GenericdpError):
    """The HTTP server cannot listen on its address (in use, not ours, bad host)."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = TEXT


Route = Callable[[], Response]


class _CountingReader(asyncio.StreamReader):
    """A StreamReader that counts the bytes it was given: silent clients are shed first."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.received = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:  # typeshed's spelling of bytes
        self.received += len(data) if isinstance(data, Sized) else 0
        super().feed_data(data)


class _Connection:
    """One open connection: whether it is still reading its head, and what it sent."""

    __slots__ = ("reader", "reading", "socket")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.socket = writer.get_extra_info("socket")
        self.reading = True

    @property
    def silent(self) -> bool:
        """Nothing received: not by us, and nothing waiting in the kernel either."""
        if not isinstance(self.reader, _CountingReader) or self.reader.received:
            return False
        try:
            waiting = fcntl.ioctl(self.socket.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except (OSError, AttributeError):  # closed meanwhile, or no socket
            return True
        return int.from_bytes(waiting, sys.byteorder) == 0


class HttpServer:
    """Serves ``routes`` (path -> handler) until ``close``."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        *,
        read_timeout: float = READ_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._routes = dict(routes)
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        self._server: asyncio.Server | None = None
        # Oldest first (dicts keep insertion order): the order in which to shed.
        self._connections: dict[asyncio.Task[object], _Connection] = {}
        self._handlers: set[asyncio.Task[object]] = set()  # with those shed, still closing
        self._limited = RateLimitedLog(log)
        self.shed = 0  # connections dropped to make room, since start

    async def start(self, address: Address) -> None:
        try:
            # asyncio.start_server, with a reader that counts what it gets.
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                lambda: asyncio.StreamReaderProtocol(_CountingReader(MAX_HEAD), self._handle),
                address.host,
                address.port,
            )
        except OSError as exc:
            raise ListenError(f"cannot listen on {address}: {exc.strerror or exc}") from exc

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where it listens (host, port): with port 0, the port the system chose."""
        if self._server is None:
            return []
        return [s.getsockname()[:2] for s in self._server.sockets]

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        connections = list(self._handlers)
        for task in connections:
            task.cancel()
        if connections:
            await asyncio.wait(connections)
        if server is not None:
            await server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("task is not set")
        task.set_name("http/connection")
        self._handlers.add(task)
        try:
            await self._serve(task, reader, writer)
        except asyncio.CancelledError:
            # Shed, or close(): both ours. Ending quietly, because asyncio logs a
            # connection handler that ends cancelled as an unhandled error.
            task.uncancel()
        finally:
            self._handlers.discard(task)

    async def _serve(
        self, task: asyncio.Task[object], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        connection = _Connection(reader, writer)
        try:
            if not self._make_room():
                self._limited.warning(
                    "full",
                    "http: %d connections busy answering; closing a new one",
                    self.connections,
                )
                return
            self._connections[task] = connection
            response, head_only = await self._respond(reader)
            connection.reading = False
            async with asyncio.timeout(WRITE_TIMEOUT):
                writer.write(_encode(response, head_only=head_only))
                await writer.drain()
        except (TimeoutError, ConnectionError):
            pass  # the client went away or would not read: nothing to tell it
        except Exception:  # noqa: BLE001 -- one request's failure must not stop the server
            self._limited.exception("failed", "http: request failed")
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(WRITE_TIMEOUT):
                    await writer.wait_closed()

    def _make_room(self) -> bool:
        """Below the cap, or shed a connection still reading its head; False if none is.
        The oldest that has sent nothing goes first, else the oldest still reading."""
        if len(self._connections) < self._max_connections:
            return True
        reading = [(t, c) for t, c in self._connections.items() if c.reading]
        if not reading:
            return False
        task, _ = next(((t, c) for t, c in reading if c.silent), reading[0])
        del self._connections[task]  # its slot is the new one's now
        task.cancel()
        self.shed += 1
        self._limited.warning(
            "shed",
            "http: %d connections open; dropped one that had not sent its request "
            "(%d dropped since start)",
            self._max_connections,
            self.shed,
        )
        return True

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[Response, bool]:
        """The response, and whether to leave its body out (HEAD)."""
        try:
            async with asyncio.timeout(self._read_timeout):
                head = await reader.readuntil(_END_OF_HEAD)
        except TimeoutError:
            return _status(HTTPStatus.REQUEST_TIMEOUT, "request head too slow"), False
        except asyncio.LimitOverrunError:
            too_large = f"request head larger than {MAX_HEAD} bytes"
            return _status(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, too_large), False
        except asyncio.IncompleteReadError:
            return _status(HTTPStatus.BAD_REQUEST, "incomplete request"), False
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):  # noqa: PLR2004 -- method, target, version
            return _status(HTTPStatus.BAD_REQUEST, "not an HTTP/1.x request line"), False
        method, target, _ = parts
        return self._route(method, target.split("?", 1)[0]), method == "HEAD"

    def _route(self, method: str, path: str) -> Response:
        route = self._routes.get(path)
        if route is None:
            return _status(HTTPStatus.NOT_FOUND, f"no such path: {path}")
        if method not in _METHODS:
            return _status(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} not allowed")
        try:
            return route()
        except Exception:
            log.exception("http: handler of %s failed", path)
            return _status(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")


def _status(status: HTTPStatus, reason: str) -> Response:
    return Response(status.value, f"{status.value} {status.phrase}: {reason}\n".encode())


def _encode(response: Response, *, head_only: bool) -> bytes:
    status = HTTPStatus(response.status)
    headers = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    if status is HTTPStatus.METHOD_NOT_ALLOWED:
        headers.append("Allow: " + ", ".join(_METHODS))
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


async def run_http_server(
    address: Address,
    routes: Mapping[str, Route],
    *,
    on_listening: Callable[[list[tuple[str, int]]], None] = lambda _: None,
) -> None:
    """Serve ``routes`` on ``address`` until cancelled; ListenError when the address cannot
    be used, for the task guard to retry (the previous pod may still hold the port)."""
    server = HttpServer(routes)
    await server.start(address)
    try:
        where = ", ".join(f"{h}:{p}" for h, p in server.addresses)
        log.info("serving /metrics, /healthz and /readyz on %s", where)
        on_listening(server.addresses)
        await asyncio.Event().wait()  # until cancelled
    finally:
        await server.close()
