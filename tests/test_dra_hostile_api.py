"""Claim reads against a hostile API server on loopback that trickles its answers a byte
at a time: each read ends at its deadline, and the slow reads never hold back claims
that need none (already prepared, or being unprepared)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from genericdp.dra.checkpoint import Checkpoint
from genericdp.dra.inventory import Inventory
from genericdp.dra.prepare import CONCURRENCY, Preparer
from genericdp.kube import client as kubeapi
from genericdp.kubeletplugin.apiclaims import ApiClaimSource
from genericdp.kubeletplugin.claims import ClaimError
from tests.dra_fakes import NODE, SERIAL, RecordedHooks, allocated, claim, definition, setup, unit
from tests.polling import eventually

TRICKLE = 0.2  # seconds between bytes: under any per-read timeout


class TricklingServer:
    """Answers every request with headers, then one byte of body every ``TRICKLE`` s."""

    def __init__(self) -> None:
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000000\r\n\r\n{"
            )
            while True:
                await writer.drain()
                await asyncio.sleep(TRICKLE)
                writer.write(b" ")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


@pytest.fixture
async def hostile(base: Path) -> AsyncIterator[tuple[kubeapi.AsyncClient, TricklingServer]]:
    server = TricklingServer()
    port = await server.start()
    kubeconfig = base / "hostile.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: h, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {}}]\n"
        "contexts: [{name: c, context: {cluster: h, user: u, namespace: default}}]\n"
    )
    client = kubeapi.connect(kubeconfig)
    try:
        yield client, server
    finally:
        await client.close()
        await server.stop()


async def test_a_trickled_claim_read_ends_at_its_deadline(
    hostile: tuple[kubeapi.AsyncClient, TricklingServer],
) -> None:
    """A server that never finishes its answer fails the read after the deadline, saying so."""
    hostile_client, _ = hostile
    source = ApiClaimSource(hostile_client, node=NODE, deadline=0.5)
    started = time.monotonic()
    with pytest.raises(ClaimError, match=r"did not answer within 0\.5s"):
        await source.allocation(claim())
    assert time.monotonic() - started < 3


async def test_trickled_reads_never_hold_back_claims_that_need_no_read(
    hostile: tuple[kubeapi.AsyncClient, TricklingServer], base: Path
) -> None:
    """With a prepare slot's worth of reads trickling, an already prepared claim is
    answered and another unprepared at once, from the checkpoint."""
    hostile_client, server = hostile
    first = setup(base, [(definition(), [unit(0)])])
    for n in (1, 2):
        first.claims.allocate(claim(n), allocated(SERIAL, unit(0)))
        assert (await first.preparer.prepare([claim(n)]))[claim(n).uid].error == ""
    checkpoint = Checkpoint(first.checkpoint.path)
    checkpoint.load()
    inventory = Inventory(NODE)
    inventory.set_resource(definition(), [unit(0)])
    preparer = Preparer(
        driver=first.preparer.driver,
        inventory=inventory,
        claims=ApiClaimSource(hostile_client, node=NODE, deadline=30),
        checkpoint=checkpoint,
        cdi_dir=first.cdi_dir,
        run_hook=RecordedHooks(),
        node_name=NODE,
    )
    preparer.configured = frozenset({definition().name})
    slow = [
        asyncio.create_task(preparer.prepare([claim(n)]), name=f"slow-{n}")
        for n in range(3, 3 + CONCURRENCY)
    ]
    try:
        await eventually(lambda: server.requests == len(slow), "every slow read under way")
        assert not any(task.done() for task in slow)
        started = time.monotonic()
        answer = await asyncio.wait_for(preparer.prepare([claim(1)]), 5)
        assert answer[claim(1).uid].error == ""
        assert await asyncio.wait_for(preparer.unprepare([claim(2)]), 5) == {claim(2).uid: ""}
        assert time.monotonic() - started < 2
        assert checkpoint.get(claim(2).uid) is None
    finally:
        for task in slow:
            task.cancel()
        await asyncio.gather(*slow, return_exceptions=True)
