"""The asyncio toolkit (``genericdp.aio``): one-shot tasks and the inotify reader.

Backoff, guarded tasks and ``wait_event`` are tested in test_runtime_units.py.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from pathlib import Path

import pytest

from genericdp.aio import TaskSet, inotify_events, wait_event


async def test_run_logs_a_failure_and_names_may_repeat(caplog: pytest.LogCaptureFixture) -> None:
    """One-shot tasks share a name freely; a failure is logged with its traceback."""
    tasks = TaskSet(logging.getLogger("test"))
    gate = asyncio.Event()

    async def fails() -> None:
        raise RuntimeError("boom")

    async def waits() -> None:
        await gate.wait()

    first, second = tasks.run("reader", waits()), tasks.run("reader", waits())
    failed = tasks.run("bad", fails())
    await asyncio.wait([failed])
    (record,) = [r for r in caplog.records if r.getMessage() == "task bad failed"]
    assert record.exc_info is not None
    assert tasks.names == ("reader", "reader")
    gate.set()
    await asyncio.wait([first, second])
    assert len(tasks.names) == 0


async def test_stop_without_timeout_waits_and_closes_unstarted_coroutines() -> None:
    """``stop(timeout=None)`` waits for every task; one cancelled before its first step
    still closes its coroutine (no "never awaited" warning)."""
    tasks = TaskSet(logging.getLogger("test"))
    cleaned = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)
            cleaned.set()

    tasks.run("slow", slow_to_stop())
    await asyncio.sleep(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tasks.run("never-started", slow_to_stop())
        assert await tasks.stop(timeout=None) == ()
    assert cleaned.is_set()


async def test_inotify_events_sets_its_event_when_readable(tmp_path: Path) -> None:
    """The event is set when the inotify fd has events to read."""
    async with inotify_events(lambda exc: RuntimeError(str(exc))) as (inotify, readable):
        inotify.add_watch(tmp_path, 0x100)  # IN_CREATE
        (tmp_path / "new").touch()
        assert await wait_event(readable, 5.0)
        assert [e.name for e in inotify.read(timeout=0)] == ["new"]
