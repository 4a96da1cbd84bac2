"""A watch answer's lines, each at most ``MAX_EVENT_BYTES``: what a watch may make us hold.

A watch event is one JSON line. httpx's ``aiter_lines`` keeps whatever comes until a
newline does, so a server sending a line of gigabytes would have the daemon hold it all.
Here a line that grows past the limit ends the stream (``BrokenWatchError``: listed
again) with no more of it read.

The figure: the largest object a watch of ours can carry is another writer's ResourceSlice
(ours hold at most 64 devices) of 128 devices, each with 32 attributes of the longest
names (a 63-character domain, a 32-character identifier) and values (64 bytes, each
escaped as ``\\u00XX``), and 4 taints: about 2.6 MiB of JSON with its ``managedFields``;
a Node is smaller (labels and annotations at most 256 KiB each, 50 images). etcd stores
no object over 1.5 MiB (``--max-request-bytes``), the API server accepts no JSON body
over 3 MiB: 8 MiB holds any with room to spare, far less than the DaemonSet's 256 MiB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from genericdp.kube.listwatch import BrokenWatchError

MAX_EVENT_BYTES = 8 * 1024 * 1024


async def lines(
    chunks: AsyncIterator[bytes], *, what: str, limit: int = MAX_EVENT_BYTES
) -> AsyncIterator[bytes]:
    """The lines of ``chunks`` without their newlines (the last one even without);
    ``BrokenWatchError`` once a line passes ``limit`` bytes."""
    pending = bytearray()
    async for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            _check(len(pending) + end - start, limit, what)
            if pending:
                pending += chunk[start:end]
                yield bytes(pending)
                pending.clear()
            else:
                yield chunk[start:end]
            start = end + 1
        _check(len(pending) + len(chunk) - start, limit, what)
        pending += memoryview(chunk)[start:]
    if pending:
        yield bytes(pending)


def _check(size: int, limit: int, what: str) -> None:
    if size > limit:
        raise BrokenWatchError(
            f"{what}: a watch event longer than {limit} bytes ({size} bytes read without"
            " a newline): the stream is dropped"
        )
