"""Health: the per-unit state machine, and the monitor probing real subprocesses."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from genericdp.config.model import Exec, HealthCheck
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.health import HealthMonitor, HealthTracker
from genericdp.hooks.execution import ExecResult
from tests.polling import eventually

RESOURCE = "example.com/serial"
DEADLINE = 10.0  # seconds; generous, only reached when something is broken


def unit(uid: str) -> Unit:
    return Unit(id=uid, nodes=(DeviceNode(host_path=f"/dev/{uid}", container_path=f"/dev/{uid}"),))


def flag_probe(flags: Path, *, threshold: int = 2, timeout: float = 10.0) -> HealthCheck:
    """A probe that fails while ``flags/<unit id>`` exists, saying so on stderr."""
    script = 'if [ -e "$1/$GENERICDP_UNIT_ID" ]; then echo "$GENERICDP_UNIT_ID is broken" >&2; fi'
    script += '; test ! -e "$1/$GENERICDP_UNIT_ID"'
    argv = ("/bin/sh", "-c", script, "probe", str(flags))
    return HealthCheck(exec=Exec(argv, timeout), interval=5.0, failure_threshold=threshold)


class Rounds:
    """An injected sleep: each call reports a finished round, then waits for the test."""

    def __init__(self) -> None:
        self.finished: asyncio.Queue[float] = asyncio.Queue()
        self._go = asyncio.Event()

    async def __call__(self, seconds: float) -> None:
        self.finished.put_nowait(seconds)
        await self._go.wait()
        self._go.clear()

    async def first(self) -> float:
        async with asyncio.timeout(DEADLINE):
            return await self.finished.get()

    async def next(self) -> float:
        """Let the monitor run one more round and wait until it is done."""
        self._go.set()
        return await self.first()


class Changes:
    """Records every on_change call."""

    def __init__(self) -> None:
        self.calls: list[frozenset[str]] = []

    def __call__(self, unhealthy: frozenset[str]) -> None:
        self.calls.append(unhealthy)


@pytest.fixture
def flags(tmp_path: Path) -> Path:
    path = tmp_path / "flags"
    path.mkdir()
    return path


@pytest.fixture
def monitor_task() -> Iterator[Callable[[HealthMonitor], asyncio.Task[None]]]:
    """Starts ``monitor.run()`` and cancels it when the test ends."""
    tasks: list[asyncio.Task[None]] = []

    def start(monitor: HealthMonitor) -> asyncio.Task[None]:
        task = asyncio.create_task(monitor.run(), name="health-monitor")
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.cancel()


# -- HealthTracker ----------------------------------------------------------------


def proven(failure_threshold: int) -> HealthTracker:
    """A tracker whose unit passed its first probe."""
    tracker = HealthTracker(failure_threshold)
    assert tracker.record(True) is True
    return tracker


def test_tracker_is_unhealthy_until_a_probe_passes() -> None:
    """A unit never probed, or never passed, is Unhealthy; the threshold applies once proven."""
    tracker = HealthTracker(failure_threshold=3)
    assert not tracker.healthy
    assert [tracker.record(False) for _ in range(5)] == [False] * 5
    assert not tracker.healthy
    assert tracker.record(True) is True
    assert tracker.healthy
    assert tracker.record(False) is False  # 1 of 3


def test_tracker_turns_unhealthy_after_threshold_consecutive_failures() -> None:
    """Only the threshold-th consecutive failure changes the state."""
    tracker = proven(failure_threshold=3)
    assert tracker.healthy
    assert [tracker.record(False) for _ in range(3)] == [False, False, True]
    assert not tracker.healthy
    assert tracker.record(False) is False  # still unhealthy: no change
    assert not tracker.healthy


def test_tracker_recovers_after_one_success() -> None:
    """An Unhealthy unit is Healthy again after a single passing probe."""
    tracker = proven(failure_threshold=2)
    tracker.record(False)
    tracker.record(False)
    assert tracker.record(True) is True
    assert tracker.healthy
    assert tracker.record(True) is False


def test_tracker_counts_only_consecutive_failures() -> None:
    """A success in between resets the failure count."""
    tracker = proven(failure_threshold=2)
    for ok in (False, True, False, True, False):
        assert tracker.record(ok) is False
    assert tracker.healthy
    assert tracker.record(False) is True


def test_tracker_with_threshold_one_flips_at_once() -> None:
    """failureThreshold 1 makes the first failure count."""
    tracker = proven(failure_threshold=1)
    assert tracker.record(False) is True
    assert not tracker.healthy


def test_tracker_rejects_a_threshold_below_one() -> None:
    """A threshold of zero would never be healthy; it is refused."""
    with pytest.raises(ValueError, match="at least 1"):
        HealthTracker(failure_threshold=0)


# -- HealthMonitor ------------------------------------------------------------------


async def test_monitor_follows_a_unit_down_and_back_up(
    flags: Path, monitor_task: Callable[[HealthMonitor], asyncio.Task[None]]
) -> None:
    """A unit goes Unhealthy after the threshold, recovers, and on_change sees each change once."""
    rounds, changes = Rounds(), Changes()
    monitor = HealthMonitor(
        RESOURCE, flag_probe(flags), lambda: [unit("A"), unit("B")], changes, sleep=rounds
    )
    monitor_task(monitor)
    await rounds.first()
    assert monitor.unhealthy == frozenset()
    assert monitor.probed == {"A", "B"}
    assert changes.calls == [frozenset()]  # probed now: both may be advertised Healthy

    (flags / "A").touch()
    await rounds.next()  # one failure, threshold is two
    assert monitor.unhealthy == frozenset()
    await rounds.next()
    assert monitor.unhealthy == {"A"}
    assert changes.calls == [frozenset(), {"A"}]
    await rounds.next()  # still unhealthy: no new call
    assert changes.calls == [frozenset(), {"A"}]

    (flags / "A").unlink()
    await rounds.next()
    assert monitor.unhealthy == frozenset()
    assert changes.calls == [frozenset(), {"A"}, frozenset()]


async def test_monitor_forgets_units_that_disappear(flags: Path) -> None:
    """A vanished unit leaves the unhealthy set; if it returns it must pass a probe again."""
    present = [unit("A"), unit("B")]
    changes = Changes()
    monitor = HealthMonitor(RESOURCE, flag_probe(flags), lambda: present, changes)
    (flags / "A").touch()
    assert await monitor.probe_once() == {"A"}  # never passed: Unhealthy at once

    present = [unit("B")]
    assert await monitor.probe_once() == frozenset()
    assert monitor.probed == {"B"}

    present = [unit("A"), unit("B")]
    assert await monitor.probe_once() == {"A"}
    assert changes.calls == [{"A"}, frozenset(), {"A"}]


async def test_a_unit_failing_its_first_probe_is_unhealthy_at_once(
    flags: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """failureThreshold tolerates glitches of a proven unit, not a unit that never worked."""
    monitor = HealthMonitor(
        RESOURCE, flag_probe(flags, threshold=3), lambda: [unit("A")], Changes()
    )
    (flags / "A").touch()
    assert await monitor.probe_once() == {"A"}
    (message,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "unit A stays Unhealthy: its first probe failed: exited 1" in message
    assert "A is broken" in message
    assert await monitor.probe_once() == {"A"}
    assert len(caplog.records) == 1, "later failures of a never-healthy unit are not news"


async def test_new_units_are_probed_at_once_not_an_interval_later(
    flags: Path, monitor_task: Callable[[HealthMonitor], asyncio.Task[None]]
) -> None:
    """poke (new units discovered) probes the units never probed, without waiting for the round."""
    present = [unit("A")]
    rounds, changes = Rounds(), Changes()
    probed: list[str] = []
    monitor = HealthMonitor(
        RESOURCE,
        flag_probe(flags),
        lambda: present,
        changes,
        sleep=rounds,  # the interval never ends unless the test says so
        on_result=lambda uid, _: probed.append(uid),
    )
    monitor_task(monitor)
    await rounds.first()
    assert changes.calls == [frozenset()]
    (flags / "B").touch()
    present = [unit("A"), unit("B")]
    monitor.poke()
    await eventually(lambda: len(changes.calls) == 2)
    assert changes.calls[-1] == {"B"}
    assert monitor.probed == {"A", "B"}
    assert probed == ["A", "B"], "only the new unit was probed"


async def test_timeout_counts_as_failure(caplog: pytest.LogCaptureFixture) -> None:
    """A probe that hangs past its timeout fails, and the log says it timed out."""
    check = HealthCheck(exec=Exec(("/bin/sh", "-c", "exec sleep 100"), 0.2), failure_threshold=1)
    monitor = HealthMonitor(RESOURCE, check, lambda: [unit("A")], Changes())
    assert await monitor.probe_once() == {"A"}
    assert any("timed out after 0.2s" in r.getMessage() for r in caplog.records)


async def test_transition_is_logged_with_probe_output(
    flags: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Going Unhealthy is a warning carrying the probe's output; recovery is logged too."""
    caplog.set_level(logging.INFO, logger="genericdp.health")
    monitor = HealthMonitor(
        RESOURCE, flag_probe(flags, threshold=1), lambda: [unit("A")], Changes()
    )
    await monitor.probe_once()  # proven first
    (flags / "A").touch()
    await monitor.probe_once()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "example.com/serial unit A is Unhealthy" in warnings[0]
    assert "A is broken" in warnings[0]
    (flags / "A").unlink()
    await monitor.probe_once()
    assert any("unit A is Healthy again" in r.getMessage() for r in caplog.records)


async def test_monitor_survives_failing_units_and_callbacks(flags: Path) -> None:
    """Errors from the unit list or on_change are logged; the next round still reports."""
    failures = {"units": 1, "on_change": 1}
    calls: list[frozenset[str]] = []

    def units() -> Sequence[Unit]:
        if failures["units"]:
            failures["units"] -= 1
            raise RuntimeError("discovery broke")
        return [unit("A")]

    def on_change(unhealthy: frozenset[str]) -> None:
        if failures["on_change"]:
            failures["on_change"] -= 1
            raise RuntimeError("plugin broke")
        calls.append(unhealthy)

    monitor = HealthMonitor(RESOURCE, flag_probe(flags, threshold=1), units, on_change)
    (flags / "A").touch()
    assert await monitor.probe_once() == frozenset()  # units() failed: nothing probed
    assert await monitor.probe_once() == {"A"}  # on_change failed ...
    assert calls == []
    await monitor.probe_once()  # ... so the change is reported again next round
    assert calls == [{"A"}]


async def test_async_on_change_is_awaited(flags: Path) -> None:
    """on_change may be a coroutine function; it is awaited before the round ends."""
    seen: list[frozenset[str]] = []

    async def on_change(unhealthy: frozenset[str]) -> None:
        await asyncio.sleep(0)
        seen.append(unhealthy)

    monitor = HealthMonitor(
        RESOURCE, flag_probe(flags, threshold=1), lambda: [unit("A")], on_change
    )
    (flags / "A").touch()
    await monitor.probe_once()
    assert seen == [{"A"}]


async def test_probes_run_concurrently_but_bounded(tmp_path: Path) -> None:
    """No more than ``concurrency`` probes run at once, and more than one does."""
    log = tmp_path / "log"
    script = 'echo + >> "$1"; sleep 0.05; echo - >> "$1"'
    check = HealthCheck(exec=Exec(("/bin/sh", "-c", script, "probe", str(log)), 10))
    units = [unit(f"U{i}") for i in range(12)]
    monitor = HealthMonitor(RESOURCE, check, lambda: units, Changes(), concurrency=3)
    await monitor.probe_once()
    marks = log.read_text().split()
    assert len(marks) == 24
    running, peak = 0, 0
    for mark in marks:
        running += 1 if mark == "+" else -1
        peak = max(peak, running)
    assert 1 < peak <= 3


async def test_every_probe_result_is_reported(flags: Path) -> None:
    """on_result sees each unit's probe result (for metrics)."""
    results: dict[str, ExecResult] = {}
    monitor = HealthMonitor(
        RESOURCE,
        flag_probe(flags),
        lambda: [unit("A"), unit("B")],
        Changes(),
        on_result=results.__setitem__,
    )
    (flags / "B").touch()
    await monitor.probe_once()
    assert results["A"].ok
    assert results["B"].returncode == 1


async def test_run_sleeps_what_is_left_of_the_interval(
    flags: Path, monitor_task: Callable[[HealthMonitor], asyncio.Task[None]]
) -> None:
    """Rounds start every interval: time spent probing is taken off the sleep."""
    ticks = iter([100.0, 103.0, 110.0, 117.5])
    rounds = Rounds()
    monitor = HealthMonitor(
        RESOURCE,
        flag_probe(flags),  # interval 5s
        lambda: [unit("A")],
        Changes(),
        sleep=rounds,
        clock=lambda: next(ticks),
    )
    monitor_task(monitor)
    assert await rounds.first() == 2.0
    assert await rounds.next() == 0.0  # the round took longer than the interval


async def test_cancelling_the_monitor_stops_running_probes(
    tmp_path: Path, monitor_task: Callable[[HealthMonitor], asyncio.Task[None]]
) -> None:
    """Stopping a resource (cancelling run) kills the probes in flight."""
    pidfile = tmp_path / "pid"
    script = 'sleep 100 & echo $! > "$1"; wait'
    check = HealthCheck(exec=Exec(("/bin/sh", "-c", script, "probe", str(pidfile)), 60))
    task = monitor_task(HealthMonitor(RESOURCE, check, lambda: [unit("A")], Changes()))
    await eventually(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
    pid = int(pidfile.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await eventually(lambda: not running(pid))


def running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")
