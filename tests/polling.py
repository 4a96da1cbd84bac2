"""Waiting for what has no change event (another process's state, files, logs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

DEADLINE = 10.0  # seconds; generous, only reached when something is broken


async def eventually(
    condition: Callable[[], bool],
    what: str = "",
    *,
    timeout: float = DEADLINE,  # noqa: ASYNC109 - a poll, not an await with a deadline
) -> None:
    """Poll ``condition`` every 10 ms until it holds; fail the test, saying
    ``what`` was awaited, once ``timeout`` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            pytest.fail(f"still not true after {timeout}s: {what or condition}")
        await asyncio.sleep(0.01)
