"""A hostile API server on loopback whose watches end at once, for the watch loops' tests.

Lists answer no items at resourceVersion 7. A watch request ends as soon as it
is answered: with no event (``end``), with a 410 Gone error event (``gone``), or
with a 504 "Too large resource version" status (``too_large``); ``gone`` and
``too_large`` count down, then watches end plainly. Every request is recorded
with when it came (``requests``).

Worse: while ``trickle`` is set, a list is answered with headers and then one
byte every ``TRICKLE`` seconds, for ever; the first ``silent`` watches are
answered with headers and then nothing, for ever; the first ``long_line``
watches send one line of ``LONG_LINE`` bytes (no newline until its end).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path

TRICKLE = 0.2  # seconds between the bytes of a trickled list: under any per-read timeout
LONG_LINE = 64 * 1024 * 1024  # bytes of the one line a ``long_line`` watch sends
_CHUNK = b"x" * (1024 * 1024)  # one object, written again and again: the server holds no more

TOO_LARGE = {
    "kind": "Status",
    "status": "Failure",
    "message": "Timeout: Too large resource version: 7, current: 1",
    "reason": "Timeout",
    "details": {"causes": [{"reason": "ResourceVersionTooLarge"}], "retryAfterSeconds": 1},
    "code": 504,
}


class EndingServer:
    """An HTTP API server whose watches end at once (``gone``, ``too_large``: how many
    answer 410 Gone or 504 Too large first)."""

    def __init__(
        self,
        *,
        gone: int = 0,
        too_large: int = 0,
        trickle: bool = False,
        silent: int = 0,
        long_line: int = 0,
    ) -> None:
        self.requests: list[tuple[float, str]] = []  # (time.monotonic(), request target)
        self.gone = gone
        self.too_large = too_large
        self.trickle = trickle
        self.silent = silent
        self.long_line = long_line
        self.long_sent = 0  # bytes of long lines written
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()  # hostile answers end (closing at the end of a test)

    @property
    def paths(self) -> list[str]:
        return [target for _, target in self.requests]

    def watches(self) -> list[float]:
        """When each watch request came."""
        return [at for at, target in self.requests if "watch=true" in target]

    def busiest(self, window: float) -> int:
        """The most requests that came within any ``window`` seconds."""
        times = [at for at, _ in self.requests]
        return max((sum(1 for t in times if s <= t < s + window) for s in times), default=0)

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        self._stop.set()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = (await reader.readuntil(b"\r\n\r\n")).decode()
        target = request.split()[1]
        self.requests.append((time.monotonic(), target))
        watch = "watch=true" in target
        if (not watch and self.trickle) or (watch and self.silent) or (watch and self.long_line):
            await self._hostile(writer, watch=watch)
            return
        status = "200 OK"
        if "watch=true" not in target:
            body = json.dumps({"metadata": {"resourceVersion": "7"}, "items": []})
        elif self.gone:
            self.gone -= 1
            error = {"kind": "Status", "code": 410, "message": "too old resource version"}
            body = json.dumps({"type": "ERROR", "object": error}) + "\n"
        elif self.too_large:
            self.too_large -= 1
            status, body = "504 Gateway Timeout", json.dumps(TOO_LARGE)
        else:
            body = ""
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            f"\r\nConnection: close\r\n\r\n{body}".encode()
        )
        await writer.drain()

    async def _hostile(self, writer: asyncio.StreamWriter, *, watch: bool) -> None:
        """Headers, then a trickle, nothing, or one long line: never a whole answer."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        if watch and not self.silent:
            self.long_line -= 1
            writer.write(b"Transfer-Encoding: chunked\r\n\r\n")
            for _ in range(LONG_LINE // len(_CHUNK)):
                writer.write(b"%x\r\n" % len(_CHUNK))
                writer.write(_CHUNK)
                writer.write(b"\r\n")
                await writer.drain()
                self.long_sent += len(_CHUNK)
            writer.write(b"1\r\n\n\r\n0\r\n\r\n")
            await writer.drain()
            return
        writer.write(b"Content-Length: 1000000\r\n\r\n{")
        await writer.drain()
        if watch:
            self.silent -= 1
            await self._stop.wait()
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TRICKLE):
                    await self._stop.wait()
            writer.write(b" ")
            await writer.drain()


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig at ``path`` for ``server`` (plain HTTP, a token nobody checks)."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path
