"""The allocator is trimmed once after a burst of work, never while idle."""

from __future__ import annotations

import asyncio

from genericdp.memtrim import Trimmer, _malloc_trim
from tests.polling import eventually


def test_one_trim_once_the_pokes_stop() -> None:
    calls: list[int] = []

    def trim(pad: int) -> int:
        calls.append(pad)
        return 1

    async def main() -> None:
        trimmer = Trimmer(quiet=0.3, trim=trim)
        loop = asyncio.get_running_loop()
        first = loop.time()
        for _ in range(5):  # a burst: each poke puts the trim off
            trimmer.poke()
            await asyncio.sleep(0.01)
        last = loop.time()
        await eventually(lambda: calls == [0], "the trim", timeout=10.0)
        assert loop.time() >= last + 0.3 - 0.02 > first + 0.3  # counted from the last poke
        assert trimmer.trims == 1
        assert not trimmer.pending  # idle: no timer left to wake the loop
        trimmer.poke()
        assert trimmer.pending
        trimmer.cancel()
        assert not trimmer.pending

    asyncio.run(main())


def test_glibc_has_malloc_trim() -> None:
    trim = _malloc_trim()
    assert trim is not None  # the image and CI run on glibc
    assert trim(0) in (0, 1)


def test_a_poke_without_a_loop_does_nothing() -> None:
    trimmer = Trimmer(quiet=0.0, trim=lambda _pad: 0)
    trimmer.poke()
    assert not trimmer.pending
