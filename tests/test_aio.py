"""The asyncio toolkit (``genericdp.aio``): backoff, guarded and one-shot tasks,
``wait_event``, the inotify reader and the stop signals."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import warnings
from pathlib import Path

import pytest

from genericdp.aio import Backoff, Changes, StopSignals, TaskSet, inotify_events, wait_event
from genericdp.errors import KubeletError
from tests.leaks import reap_leaked


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


def test_backoff_doubles_to_maximum_with_jitter() -> None:
    """Delays grow from initial by the factor up to maximum, within the jitter band."""
    b = Backoff(initial=0.1, maximum=0.5, jitter=0.2, rng=random.Random(1))  # noqa: S311 -- jitter
    delays = [b.next() for _ in range(6)]
    bases = [0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    for delay, base in zip(delays, bases, strict=True):
        assert base * 0.8 <= delay <= base * 1.2
    b.reset()
    assert b.next() <= 0.12


async def test_taskset_restarts_failed_task_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    """A failing task is logged by name and restarted; stop cancels and awaits it."""
    runs = 0
    restarted = asyncio.Event()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("boom")
        restarted.set()
        await asyncio.Event().wait()

    tasks = TaskSet(logging.getLogger("test"))
    tasks.spawn("flaky", flaky, backoff=Backoff(initial=0.001, maximum=0.001))
    await asyncio.wait_for(restarted.wait(), 5)
    assert "task flaky failed" in caplog.text
    assert tasks.names == ("flaky",)
    assert await tasks.stop(timeout=2) == ()
    assert len(tasks.names) == 0


async def test_taskset_logs_our_errors_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A task failing with one of our errors logs its message, not a traceback; others get one."""
    failures = [KubeletError("cannot watch /nowhere"), RuntimeError("a bug")]
    done = asyncio.Event()

    async def failing() -> None:
        if failures:
            raise failures.pop(0)
        done.set()

    tasks = TaskSet(logging.getLogger("test"))
    tasks.spawn("watch", failing, backoff=Backoff(initial=0.001, maximum=0.001))
    await asyncio.wait_for(done.wait(), 5)
    ours, bug = [r for r in caplog.records if "task watch failed" in r.getMessage()]
    assert ours.getMessage() == "task watch failed: cannot watch /nowhere"
    assert ours.exc_info is None
    assert bug.exc_info is not None
    assert await tasks.stop(timeout=2) == ()


async def test_taskset_reports_stragglers() -> None:
    """A task that ignores cancellation past the timeout is named as a straggler."""
    release = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()

    tasks = TaskSet(logging.getLogger("test"))
    task = tasks.spawn("stubborn", stubborn)
    await asyncio.sleep(0)
    assert await tasks.stop(timeout=0.01) == ("stubborn",)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wait_event_times_out_fires_and_stays_cancellable() -> None:
    """wait_event says whether the event fired in time, and a cancel always ends it."""
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    event.set()
    assert await wait_event(event, 10)
    event.clear()
    waiter = asyncio.create_task(wait_event(event, 10))
    await asyncio.sleep(0)  # let it start waiting
    event.set()  # fire and cancel together: the cancel must win
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_stop_signals_name_the_first_signal_and_are_given_back(sig: signal.Signals) -> None:
    """A stop signal ends the wait with its name; after remove it has its default effect."""
    signals = StopSignals()
    try:
        os.kill(os.getpid(), sig)
        async with asyncio.timeout(10):
            assert await signals.wait() == sig.name
    finally:
        signals.remove()
    default = signal.default_int_handler if sig is signal.SIGINT else signal.SIG_DFL
    assert signal.getsignal(sig) is default


async def test_a_guarded_task_that_returns_is_logged_unless_finishable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A spawned loop that falls out is a warning naming it; a finishable one ends quietly."""

    async def returns() -> None:
        return

    tasks = TaskSet(logging.getLogger("test"))
    await tasks.spawn("loop", returns, backoff=Backoff(initial=0.001, maximum=0.001))
    await tasks.spawn("one-job", returns, finishable=True)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warned] == ["task loop ended unexpectedly"]
    assert tasks.names == ()


async def test_the_leak_check_names_a_forgotten_task_and_spares_finishing_ones() -> None:
    """What ``no_leaked_tasks`` fails on: a task still running, not one that is ending."""
    before = asyncio.all_tasks()
    forgotten = asyncio.create_task(asyncio.Event().wait(), name="forgotten")
    ending = asyncio.create_task(asyncio.sleep(0), name="ending")
    assert await reap_leaked(before, grace=0.2) == ["forgotten"]
    assert forgotten.cancelled()
    assert ending.done()
    assert not ending.cancelled()
    assert await reap_leaked(before, grace=0.2) == []


async def test_changes_wake_every_waiter_on_its_own_condition() -> None:
    """Each change wakes all waiters; each returns once its own condition holds."""
    changes, state = Changes(), {"n": 0}
    first = asyncio.create_task(changes.until(lambda: state["n"] >= 1, 10))
    second = asyncio.create_task(changes.until(lambda: state["n"] >= 2, 10))
    await asyncio.sleep(0)  # both waiting
    for n in (1, 2):
        state["n"] = n
        changes.notify()
    assert await first
    assert await second
    assert not await changes.until(lambda: state["n"] >= 3, 0.01)
