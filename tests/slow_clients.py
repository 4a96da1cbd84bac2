"""Slow HTTP clients for flood tests, run in a process of their own.

``python -m tests.slow_clients PORT silent|dribble COUNT`` keeps ``COUNT``
clients connected to ``127.0.0.1:PORT`` until killed, each reconnecting
whenever the server drops it. In its own process, as an attacker is: the
clients' work does not run on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def idle(port: int, stop: asyncio.Event) -> None:
    """A client that connects and sends nothing, reconnecting whenever it is dropped."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                await reader.read()  # until the server drops us
            finally:
                writer.close()


async def dribble(port: int, stop: asyncio.Event) -> None:
    """A client that sends one byte of its request head a second, reconnecting when dropped."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                for byte in b"GET /healthz HTTP/1.1\r\n\r\n":
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(1)
            finally:
                writer.close()


KINDS = {"silent": idle, "dribble": dribble}


async def _main(port: int, kind: str, count: int) -> None:
    client = KINDS[kind]
    stop = asyncio.Event()  # never set: the process is killed
    await asyncio.gather(*(client(port, stop) for _ in range(count)))


if __name__ == "__main__":
    asyncio.run(_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
