"""The Prometheus metrics of ``genericdp reconcile-classes``, in a registry of its own.

The config families keep their names and meaning under ``serve``: one dashboard reads both.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from genericdp import __version__
from genericdp.deviceclasses.sync import Recorder, SyncStatus
from genericdp.runtime.configwatch import Outcome

RELOAD_RESULTS = tuple(o.value for o in Outcome)
RELOAD_SUCCESS = frozenset({Outcome.APPLIED.value, Outcome.UNCHANGED.value})
ACTIONS = ("create", "update", "delete")
RESULTS = ("ok", "error")
STATES = ("owned", "kept", "foreign")


class ClassMetrics(Recorder):
    """The reconciler's ``Recorder`` and its /metrics (``exposition``)."""

    def __init__(self, *, clock: Callable[[], float] = time.time, process: bool = True) -> None:
        self.registry = r = CollectorRegistry()
        self._clock = clock
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        Gauge(
            "genericdp_build_info", "Always 1; the version in a label.", ["version"], registry=r
        ).labels(__version__).set(1)
        self._writes = Counter(
            "genericdp_deviceclass_writes",
            "DeviceClasses created, updated or deleted, by result.",
            ["action", "result"],
            registry=r,
        )
        self._syncs = Counter(
            "genericdp_deviceclass_syncs",
            "Comparisons of the DeviceClasses with the config, by result.",
            ["result"],
            registry=r,
        )
        self._reloads = Counter(
            "genericdp_config_reloads", "Config reloads, by result.", ["result"], registry=r
        )
        self._reload_ok = Gauge(
            "genericdp_config_last_reload_successful",
            "1 if the last load or reload was applied or unchanged.",
            registry=r,
        )
        self._reload_time = Gauge(
            "genericdp_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful load or reload.",
            registry=r,
        )
        for action, result in itertools.product(ACTIONS, RESULTS):
            self._writes.labels(action, result)
        for result in RESULTS:
            self._syncs.labels(result)
        for result in RELOAD_RESULTS:
            self._reloads.labels(result)

    def track(self, status: Callable[[], SyncStatus], leading: Callable[[], bool]) -> None:
        """Report ``status()`` (the last sync) and ``leading()`` at every scrape."""
        self.registry.register(_Collector(status, leading))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def config_loaded(self, *, ok: bool) -> None:
        """The config at start or a reload: valid (applied) or not."""
        self._reload_ok.set(1 if ok else 0)
        if ok:
            self._reload_time.set(self._clock())

    def config_reload(self, result: str) -> None:
        self._reloads.labels(result).inc()
        self.config_loaded(ok=result in RELOAD_SUCCESS)

    def write(self, action: str, *, ok: bool) -> None:
        self._writes.labels(action, "ok" if ok else "error").inc()

    def sync(self, *, ok: bool) -> None:
        self._syncs.labels("ok" if ok else "error").inc()


class _Collector(Collector):
    def __init__(self, status: Callable[[], SyncStatus], leading: Callable[[], bool]) -> None:
        self._status, self._leading = status, leading

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        leader = GaugeMetricFamily(
            "genericdp_deviceclass_leader", "1 while this replica holds the Lease and may write."
        )
        leader.add_metric([], 1 if self._leading() else 0)
        classes = GaugeMetricFamily(
            "genericdp_deviceclasses",
            "DeviceClasses at the last sync: ours, ours kept while a node publishes their"
            " resource, and names wanted but held by a class without our labels.",
            labels=["state"],
        )
        status = self._status()
        for state, count in zip(
            STATES, (status.owned, len(status.kept), len(status.foreign)), strict=True
        ):
            classes.add_metric([state], count)
        return (leader, classes)
