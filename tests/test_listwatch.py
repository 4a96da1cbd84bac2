"""The list-then-watch loop alone, over a scripted source and a recorded sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from genericdp.aio import Backoff, TaskSet
from genericdp.kube.listwatch import ExpiredError, ListWatch


class Scripted:
    """Lists at version 5; each watch yields the next script entry's versions, or raises it."""

    def __init__(self, script: list[list[str] | Exception]) -> None:
        self.script = script
        self.calls: list[str] = []  # "list", or "watch <version>"

    async def relist(self) -> str:
        self.calls.append("list")
        return "5"

    async def follow(
        self,
        version: str,
        seconds: int,  # noqa: ARG002 -- the source protocol's signature
    ) -> AsyncIterator[str]:
        self.calls.append(f"watch {version}")
        step = self.script.pop(0) if self.script else []
        if isinstance(step, Exception):
            raise step
        for seen in step:
            yield seen


async def test_every_end_waits_and_the_watch_goes_on_from_its_last_real_version() -> None:
    """A clean end, a failure and a 410 each wait the next backoff; an event without a
    version keeps the last one; only the 410 lists again; restarts are counted by reason."""
    source = Scripted([["6", ""], ConnectionError("reset"), ExpiredError("410"), ["9"]])
    delays: list[float] = []
    done = asyncio.Event()

    async def sleep(delay: float) -> None:
        delays.append(delay)
        if len(delays) == 4:
            done.set()
            await asyncio.Event().wait()

    watch = ListWatch("x", source, Backoff(initial=0.5, maximum=30.0, jitter=0.0), sleep=sleep)
    tasks = TaskSet()
    tasks.spawn("list-watch", watch.run)
    try:
        await asyncio.wait_for(done.wait(), 10)
    finally:
        await tasks.stop()
    assert source.calls == ["list", "watch 5", "watch 6", "watch 6", "list", "watch 5"]
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert watch.restarts == {"ended": 2, "expired": 1, "failed": 1}
