"""The runtime's Prometheus ``Recorder``, on a registry of its own (several supervisors and
tests in one process never collide). State is read from ``status()`` at scrape time, so
it is always consistent; events are counters and histograms. Labels stay low-cardinality:
the resource name, never device IDs or pods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from genericdp import __version__
from genericdp.runtime.recorder import ALLOCATION_RESULTS, CLAIM_RESULTS, REGISTRATION_RESULTS

if TYPE_CHECKING:
    from genericdp.runtime.backend import Gauge as BackendGauge
    from genericdp.runtime.edge import PluginStatus

log = logging.getLogger(__name__)

# 5 ms (an Allocate) to 30 s (an init hook). Few buckets on purpose: bucket lines
# are most of a scrape, rendered on the daemon's loop.
DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 1, 2.5, 10, 30)

RELOAD_RESULTS = ("applied", "unchanged", "refused", "failed")
RELOAD_SUCCESS = frozenset({"applied", "unchanged"})
# What ``serve`` serves: the config it loaded, the last good one kept on the
# node (the config was invalid at start), or nothing (and none was kept).
CONFIG_SOURCES = ("config", "last_good", "none")


class StatusSource(Protocol):
    """What the scrape-time collector reads: the supervisor."""

    def status(self) -> Mapping[str, PluginStatus]: ...

    def gauges(self) -> tuple[BackendGauge, ...]: ...  # the backend's own (its kubelet watch)


class Metrics:
    """The Prometheus ``Recorder``, with its own registry; ``exposition()`` is /metrics."""

    def __init__(
        self,
        *,
        version: str = __version__,
        clock: Callable[[], float] = time.time,
        process: bool = True,
    ) -> None:
        self.registry = CollectorRegistry()
        self._clock = clock
        self._seen: set[str] = set()
        self._drivers: set[str] = set()
        # (resource, result) -> the children of genericdp_allocations and the duration
        self._allocation_children: dict[tuple[str, str], tuple[Counter, Histogram]] = {}
        if process:  # RSS, CPU and open fds: what a DaemonSet's limits are measured by
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self._gauge(
            "genericdp_build_info", "Always 1; the version in a label.", ["version"]
        ).labels(version).set(1)
        self._registrations = self._counter(
            "genericdp_registrations",
            "Attempts to register with the kubelet, by result.",
            ["resource", "result"],
        )
        self._allocations = self._counter(
            "genericdp_allocations", "Allocate calls, by result.", ["resource", "result"]
        )
        self._allocate_seconds = self._histogram(
            "genericdp_allocate_duration_seconds",
            "Time to answer Allocate, init hooks included.",
            ["resource"],
        )
        self._hooks = self._counter(
            "genericdp_hook_runs",
            "Hook runs (init, preStart, cleanup), by result.",
            ["resource", "hook", "result"],
        )
        self._hook_seconds = self._histogram(
            "genericdp_hook_duration_seconds", "How long hooks ran.", ["resource", "hook"]
        )
        self._probes = self._counter(
            "genericdp_health_probes", "Health probe runs, by result.", ["resource", "result"]
        )
        self._probe_seconds = self._histogram(
            "genericdp_health_probe_duration_seconds", "How long health probes ran.", ["resource"]
        )
        self._reloads = self._counter(
            "genericdp_config_reloads", "Config reloads, by result.", ["result"]
        )
        self._reload_ok = self._gauge(
            "genericdp_config_last_reload_successful",
            "1 if the last config load or reload succeeded (applied or unchanged).",
        )
        self._reload_time = self._gauge(
            "genericdp_config_last_reload_success_timestamp_seconds",
            "When the config was last loaded or reloaded successfully (Unix time).",
        )
        self._config_source = self._gauge(
            "genericdp_config_source",
            "1 for what is served: the config (config), the last good config kept on the"
            " node because the config was invalid at start (last_good), or nothing (none).",
            ["source"],
        )
        self._kubelet_restarts = self._counter(
            "genericdp_kubelet_restarts_seen",
            "Kubelet restarts seen (a new kubelet.sock in the plugin directory).",
        )
        # The DRA backend's claims: a claim may hold devices of several
        # resources, so these go by driver (one per daemon), not by resource.
        self._prepares = self._counter(
            "genericdp_dra_prepares",
            "Claims prepared (NodePrepareResources, per claim), by result.",
            ["driver", "result"],
        )
        self._prepare_seconds = self._histogram(
            "genericdp_dra_prepare_duration_seconds",
            "Time to prepare one claim, init and preStart hooks included.",
            ["driver"],
        )
        self._unprepares = self._counter(
            "genericdp_dra_unprepares",
            "Claims unprepared (NodeUnprepareResources, per claim), by result.",
            ["driver", "result"],
        )
        self._unprepare_seconds = self._histogram(
            "genericdp_dra_unprepare_duration_seconds",
            "Time to unprepare one claim, the cleanup hook included.",
            ["driver"],
        )
        self._labels_dropped = self._counter(
            "genericdp_node_labels_dropped",
            "Node labels not published: the value rendered is not a label value (invalid)"
            " or its template failed (render_failed); once per label and value.",
            ["resource", "reason"],
        )
        self._label_writes = self._counter(
            "genericdp_node_label_writes",
            "Writes of the node's labels (NodeFeature object or features.d file), by result.",
            ["result"],
        )
        for result in RELOAD_RESULTS:
            self._reloads.labels(result)  # present (at 0) before the first reload

    def _counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, labels: Sequence[str]) -> Histogram:
        return Histogram(
            name, documentation, labels, buckets=DURATION_BUCKETS, registry=self.registry
        )

    def _gauge(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(name, documentation, labels, registry=self.registry)

    def track(self, source: StatusSource) -> None:
        """Report ``source.status()`` at every scrape (devices, units, registration)."""
        self.registry.register(_StatusCollector(source))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    def config_at_start(self, source: str) -> None:
        """What ``serve`` started with: the config it loaded (``config``; not a reload, not
        counted as one) or, the config being invalid, ``last_good`` or ``none``."""
        self._reload_ok.set(1 if source == "config" else 0)
        if source == "config":
            self._reload_time.set(self._clock())
        self.config_source(source)

    def config_source(self, source: str) -> None:
        """What is served now: one of ``CONFIG_SOURCES``."""
        for each in CONFIG_SOURCES:
            self._config_source.labels(each).set(1 if each == source else 0)

    def registration(self, resource: str, *, ok: bool) -> None:
        self._resource(resource)
        self._registrations.labels(resource, "ok" if ok else "error").inc()

    def allocation(self, resource: str, result: str, seconds: float) -> None:
        # The labelled children, looked up once: ``labels()`` checks and locks
        # at every call, a good part of what recording an Allocate cost.
        children = self._allocation_children.get((resource, result))
        if children is None:
            self._resource(resource)
            children = (
                self._allocations.labels(resource, result),
                self._allocate_seconds.labels(resource),
            )
            self._allocation_children[(resource, result)] = children
        count, duration = children
        count.inc()
        duration.observe(seconds)

    def hook_run(self, resource: str, hook: str, result: str, seconds: float) -> None:
        self._hooks.labels(resource, hook, result).inc()
        self._hook_seconds.labels(resource, hook).observe(seconds)

    def health_probe(self, resource: str, result: str, seconds: float) -> None:
        self._probes.labels(resource, result).inc()
        self._probe_seconds.labels(resource).observe(seconds)

    def kubelet_restart(self) -> None:
        self._kubelet_restarts.inc()

    def config_reload(self, result: str) -> None:
        self._reloads.labels(str(result)).inc()
        ok = result in RELOAD_SUCCESS
        self._reload_ok.set(1 if ok else 0)
        if ok:
            self._reload_time.set(self._clock())

    def claim_prepare(self, driver: str, result: str, seconds: float) -> None:
        self._driver(driver)
        self._prepares.labels(driver, result).inc()
        self._prepare_seconds.labels(driver).observe(seconds)

    def claim_unprepare(self, driver: str, result: str, seconds: float) -> None:
        self._driver(driver)
        self._unprepares.labels(driver, result).inc()
        self._unprepare_seconds.labels(driver).observe(seconds)

    def label_dropped(self, resource: str, reason: str) -> None:
        self._labels_dropped.labels(resource, reason).inc()

    def label_write(self, *, ok: bool) -> None:
        self._label_writes.labels("ok" if ok else "error").inc()

    def _driver(self, driver: str) -> None:
        # As for resources: every outcome at 0 from the first claim on.
        if driver in self._drivers:
            return
        self._drivers.add(driver)
        for result in CLAIM_RESULTS:
            self._prepares.labels(driver, result)
            self._unprepares.labels(driver, result)

    def _resource(self, resource: str) -> None:
        # Counters of a resource exist (at 0) from its first event on, so that
        # rate() and increase() see its first allocation or failure too.
        if resource in self._seen:
            return
        self._seen.add(resource)
        for result in REGISTRATION_RESULTS:
            self._registrations.labels(resource, result)
        for result in ALLOCATION_RESULTS:
            self._allocations.labels(resource, result)


class _StatusCollector(Collector):
    """Gauges read from the supervisor at scrape time."""

    def __init__(self, source: StatusSource) -> None:
        self._source = source

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None, self._source.gauges()))

    def collect(self) -> Iterable[Metric]:
        return list(self._families(self._source.status(), self._source.gauges()))

    def _families(
        self, statuses: Mapping[str, PluginStatus] | None, gauges: tuple[BackendGauge, ...]
    ) -> Iterator[Metric]:
        devices = GaugeMetricFamily(
            "genericdp_devices",
            "Device IDs advertised to the kubelet (units times count), by health.",
            labels=["resource", "health"],
        )
        units = GaugeMetricFamily("genericdp_units", "Units discovered.", labels=["resource"])
        left_out = GaugeMetricFamily(
            "genericdp_units_left_out",
            "Units found but not served: over the node's unit or device-ID limits.",
            labels=["resource"],
        )
        registered = GaugeMetricFamily(
            "genericdp_registered", "1 while registered with the kubelet.", labels=["resource"]
        )
        streams = GaugeMetricFamily(
            "genericdp_list_and_watch_streams",
            "ListAndWatch streams the kubelet holds open.",
            labels=["resource"],
        )
        for name, s in (statuses or {}).items():
            devices.add_metric([name, "healthy"], s.healthy)
            devices.add_metric([name, "unhealthy"], s.devices - s.healthy)
            units.add_metric([name], s.units)
            left_out.add_metric([name], s.left_out)
            registered.add_metric([name], 1 if s.registered else 0)
            streams.add_metric([name], s.streams)
        yield from (devices, units, left_out, registered, streams)
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for gauge in gauges:
            family = families.get(gauge.name)
            if family is None:
                kind = CounterMetricFamily if gauge.counter else GaugeMetricFamily
                names = [label for label, _ in gauge.labels]
                family = families[gauge.name] = kind(gauge.name, gauge.help, labels=names)
            if statuses is not None:
                family.add_metric([value for _, value in gauge.labels], gauge.value)
        yield from families.values()
