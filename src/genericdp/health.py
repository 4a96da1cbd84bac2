"""Unit health: a per-unit state machine and the monitor that feeds it probes.

A unit turns Unhealthy after ``failure_threshold`` consecutive failed probes and is
Healthy again after one success (a device that can never come back forces a node
drain for a glitch). It is Unhealthy until its first probe passes: the kubelet
counts only Healthy units as allocatable, and an unchecked unit advertised Healthy
would admit a pod onto a device that fails its first probe. A new unit is probed
at once (``poke``), so allocatable follows within one probe's run time.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from genericdp import logsetup
from genericdp.config.model import HealthCheck, SysfsProbe
from genericdp.discovery.attributes import probe_unit
from genericdp.discovery.model import Roots, Unit
from genericdp.hooks import HEALTH, unit_env
from genericdp.hooks.execution import ExecResult, run_exec

DEFAULT_CONCURRENCY = 8

_log = logging.getLogger(__name__)

OnChange = Callable[[frozenset[str]], Awaitable[None] | None]
OnResult = Callable[[str, ExecResult], None]


class HealthTracker:
    """The health of one unit, fed one probe result at a time."""

    def __init__(self, failure_threshold: int = 3) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, not {failure_threshold}")
        self.failure_threshold = failure_threshold
        self.consecutive_failures = 0
        self.healthy = False  # until the first probe passes

    def record(self, ok: bool) -> bool:
        """Count one probe result; True if the healthy state changed."""
        self.consecutive_failures = 0 if ok else self.consecutive_failures + 1
        healthy = ok or (self.healthy and self.consecutive_failures < self.failure_threshold)
        changed, self.healthy = healthy != self.healthy, healthy
        return changed


class HealthMonitor:
    """Probes every unit ``units()`` returns each ``check.interval`` seconds, and units
    never probed at once after ``poke``. ``on_change`` (plain or async) gets the unhealthy
    IDs whenever they or the ``probed`` set change. No failure of a probe, ``units`` or
    ``on_change`` ends ``run``: each is logged."""

    def __init__(
        self,
        resource: str,
        check: HealthCheck,
        units: Callable[[], Sequence[Unit]],
        on_change: OnChange,
        *,
        node_name: str = "",
        concurrency: int = DEFAULT_CONCURRENCY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_result: OnResult | None = None,
        logger: logging.Logger | None = None,
        roots: Roots | None = None,
    ) -> None:
        self.resource = resource
        self.check = check
        self._units = units
        self._on_change = on_change
        self._on_result = on_result
        self._node_name = node_name
        self._slots = asyncio.Semaphore(concurrency)
        self._sleep = sleep
        self._clock = clock
        self._log = logger or _log
        self._trackers: dict[str, HealthTracker] = {}
        self._reported: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._poked = asyncio.Event()
        self._roots = roots or Roots()
        self._reading: asyncio.Future[list[ExecResult]] | None = None  # sysfs reads in flight

    @property
    def unhealthy(self) -> frozenset[str]:
        return frozenset(uid for uid, t in self._trackers.items() if not t.healthy)

    @property
    def probed(self) -> frozenset[str]:
        """IDs of the units probed at least once (the others are not known to work)."""
        return frozenset(self._trackers)

    def poke(self) -> None:
        """The units changed: probe the new ones now rather than at the next round."""
        self._poked.set()

    async def run(self) -> None:
        while True:
            deadline = self._clock() + self.check.interval
            await self._guarded(only_new=False)
            while await self._wait(max(0.0, deadline - self._clock())):
                await self._guarded(only_new=True)

    async def _guarded(self, *, only_new: bool) -> None:
        try:
            await self.probe_once(only_new=only_new)
        except Exception:  # noqa: BLE001 -- a bug of ours must not stop health checking
            self._log.exception("health round for %s failed", self.resource)

    async def _wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; True if poked first (or before)."""
        if not self._poked.is_set():
            sleeping = asyncio.ensure_future(self._sleep(seconds))
            poked = asyncio.ensure_future(self._poked.wait())
            try:
                await asyncio.wait((sleeping, poked), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeping.cancel()
                poked.cancel()
        was_poked = self._poked.is_set()
        self._poked.clear()
        return was_poked

    async def probe_once(self, *, only_new: bool = False) -> frozenset[str]:
        """One round (``only_new``: of units never probed); the unhealthy IDs."""
        try:
            units = {u.id: u for u in self._units()}
        except Exception:  # noqa: BLE001 -- a bug of ours must not stop health checking
            self._log.exception("health: cannot list units of %s", self.resource)
            return self.unhealthy
        for gone in self._trackers.keys() - units.keys():
            del self._trackers[gone]  # a vanished unit leaves the list, healthy or not
        if only_new:
            units = {uid: u for uid, u in units.items() if uid not in self._trackers}
        results: Sequence[ExecResult | None]
        if self.check.sysfs is not None:
            results = await self._read_sysfs(self.check.sysfs, list(units.values()))
        else:
            results = await asyncio.gather(*(self._probe(u) for u in units.values()))
        for unit, result in zip(units.values(), results, strict=True):
            self._record(unit.id, result)
        await self._report()
        return self.unhealthy

    async def _probe(self, unit: Unit) -> ExecResult | None:
        """Run the probe for one unit; None if running it failed on our side."""
        if self.check.exec is None:
            raise RuntimeError("the config has exec or sysfs")
        env = unit_env(self.resource, [unit], node_name=self._node_name, hook=HEALTH)
        try:
            async with self._slots:
                result = await run_exec(self.check.exec, env=env)
        except Exception:  # noqa: BLE001 -- a bug of ours fails that probe, not the round
            with logsetup.fields(resource=self.resource, unit=unit.id):
                self._log.exception("health probe of %s unit %s failed", self.resource, unit.id)
            return None
        self._report_result(unit.id, result)
        return result

    def _report_result(self, unit_id: str, result: ExecResult) -> None:
        if self._on_result is not None:
            try:
                self._on_result(unit_id, result)
            except Exception:  # noqa: BLE001 -- a caller's callback must not stop health checking
                self._log.exception("health: on_result callback failed")

    async def _read_sysfs(self, probe: SysfsProbe, units: list[Unit]) -> list[ExecResult]:
        """Every unit's attribute read in one worker thread. A blocked read (a driver stuck
        in its show function) cannot be interrupted: past the timeout its units fail, and
        so do the next rounds until that thread returns, instead of piling up threads."""
        if not units:
            return []
        argv = ("sysfs", probe.attribute)
        if self._reading is not None and not self._reading.done():
            blocked = ExecResult(argv, None, True, "an earlier read is still blocked", 0.0, None)
            return [blocked for _ in units]
        started = time.monotonic()
        reading = self._reading = asyncio.ensure_future(
            asyncio.to_thread(self._read_all, probe, units)
        )
        results: list[ExecResult]
        try:
            async with asyncio.timeout(probe.timeout):  # not wait_for: see aio.wait_event
                results = list(await asyncio.shield(reading))
        except TimeoutError:
            elapsed = time.monotonic() - started
            timed_out = ExecResult(argv, None, True, "read timed out", elapsed, None)
            results = [timed_out for _ in units]
        for unit, result in zip(units, results, strict=True):
            self._report_result(unit.id, result)
        return results

    def _read_all(self, probe: SysfsProbe, units: list[Unit]) -> list[ExecResult]:
        results = []
        for unit in units:
            started = time.monotonic()
            try:
                reading = probe_unit(unit, probe, self._roots)
                ok, detail = reading.ok, reading.detail
            except Exception as exc:  # noqa: BLE001 -- a bug of ours fails that unit, not the round
                ok, detail = False, f"probe failed: {exc!r}"
            elapsed = time.monotonic() - started
            results.append(
                ExecResult(("sysfs", probe.attribute), 0 if ok else 1, False, detail, elapsed, None)
            )
        return results

    def _record(self, unit_id: str, result: ExecResult | None) -> None:
        tracker = self._trackers.get(unit_id)
        first = tracker is None
        if tracker is None:
            tracker = self._trackers[unit_id] = HealthTracker(self.check.failure_threshold)
        ok = result is not None and result.ok
        changed = tracker.record(ok)
        name, how = f"{self.resource} unit {unit_id}", self._how(result)
        with logsetup.fields(resource=self.resource, unit=unit_id):
            if first:  # Unhealthy until now: only a failure is news
                if not ok:
                    self._log.warning(
                        "%s stays Unhealthy: its first probe failed: %s%s",
                        name, how, self._output(result),
                    )  # fmt: skip
            elif changed and tracker.healthy:
                self._log.info("%s is Healthy again", name)
            elif changed:
                self._log.warning(
                    "%s is Unhealthy after %d failed probes: %s%s",
                    name, tracker.consecutive_failures, how, self._output(result),
                )  # fmt: skip
            elif not ok:
                self._log.debug(
                    "%s: probe failed (%d/%d): %s",
                    name, tracker.consecutive_failures, tracker.failure_threshold, how,
                )  # fmt: skip

    def _output(self, result: ExecResult | None) -> str:
        """The probe's output on lines of its own (a sysfs reading is in ``_how`` already)."""
        if self.check.sysfs is not None or result is None or not result.output.strip():
            return ""
        return "\n" + result.output.rstrip()

    def _how(self, result: ExecResult | None) -> str:
        if result is None:
            return "probe could not be run"
        if result.timed_out:
            detail = f" ({result.output})" if self.check.sysfs is not None else ""
            return f"timed out after {self.check.timeout:g}s{detail}"
        if self.check.sysfs is not None:
            return result.output
        return result.describe()

    async def _report(self) -> None:
        unhealthy, probed = self.unhealthy, self.probed
        if (unhealthy, probed) == self._reported:
            return
        try:
            outcome = self._on_change(unhealthy)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:  # noqa: BLE001 -- not reported: tried again after the next round
            self._log.exception("health: on_change callback of %s failed", self.resource)
            return
        self._reported = unhealthy, probed


# Characters of a probe's output a reason keeps (its end says most; the DRA health
# stream clips a whole reason to 1024).
REASON_TAIL = 800


def failure_reason(check: HealthCheck, result: ExecResult) -> str:
    """Why a probe failed, for a pod's status: ``health probe exited 3: <the output's last
    REASON_TAIL characters, lines joined by " | ">``, or ``sysfs operstate: <what was read>``."""
    if check.sysfs is not None:
        how = f"sysfs {check.sysfs.attribute}: {result.output.strip() or 'nothing read'}"
        return f"{how} (after {check.sysfs.timeout:g}s)" if result.timed_out else how
    if result.error is not None:
        return f"health probe could not start: {result.error}"
    how = f"timed out after {check.timeout:g}s" if result.timed_out else result.describe()
    tail = _tail(result.output)
    return f"health probe {how}: {tail}" if tail else f"health probe {how}"


def _tail(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    joined = " | ".join(lines)
    return joined if len(joined) <= REASON_TAIL else "..." + joined[-(REASON_TAIL - 3) :]
