"""Finding the asyncio tasks a test leaves behind (the ``no_leaked_tasks`` fixture)."""

from __future__ import annotations

import asyncio
from collections.abc import Set as AbstractSet

LEAK_GRACE = 1.0  # seconds for tasks cancelled as the test ended to finish


async def reap_leaked(
    before: AbstractSet[asyncio.Task[object]],
    grace: float = LEAK_GRACE,
) -> list[str]:
    """Names of the tasks started since ``before`` that are still running after
    ``grace`` seconds; those are cancelled (and awaited) so they end here."""
    current = asyncio.current_task()
    left = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
    if left:
        await asyncio.wait(left, timeout=grace)
    leaked = sorted(t.get_name() for t in left if not t.done())
    for task in left:
        task.cancel()
    await asyncio.gather(*left, return_exceptions=True)
    return leaked
