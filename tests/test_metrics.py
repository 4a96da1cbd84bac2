"""Metrics, hook timing and the probe verdicts, without a daemon or a network."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from genericdp import __version__
from genericdp.config.model import Exec
from genericdp.deviceclasses.metrics import ClassMetrics
from genericdp.deviceclasses.sync import SyncStatus
from genericdp.dra.backend import DraBackend
from genericdp.errors import CdiSpecError, HookError, InvalidDevicesError, TemplateRenderError
from genericdp.hooks import HookRun, HookRunError
from genericdp.hooks.execution import ExecResult
from genericdp.kubeletplugin.publisher import SlicePublisher
from genericdp.metrics import Metrics
from genericdp.probes import liveness, readiness
from genericdp.runtime.backend import Gauge
from genericdp.runtime.edge import PluginStatus
from genericdp.runtime.owed import Owed
from genericdp.runtime.recorder import (
    CLAIM_RESULTS,
    TimedHooks,
    allocation_result,
    exec_result,
)
from tests.dra_fakes import NODE, MemoryClaims, MemorySlices
from tests.runtime_harness import settings_for

SERIAL = "example.com/serial"
SPEC = Exec(argv=("/bin/true",), timeout=5.0)


def status(
    name: str = SERIAL,
    *,
    registered: bool = True,
    registrations: int = 1,
    devices: int = 4,
    healthy: int = 3,
    units: int = 2,
    streams: int = 1,
    last_error: str | None = None,
) -> PluginStatus:
    return PluginStatus(
        resource=name,
        socket=Path("/x.sock"),
        registered=registered,
        registrations=registrations,
        streams=streams,
        devices=devices,
        healthy=healthy,
        last_error=last_error,
        units=units,
    )


@dataclass
class Source:
    """A stand-in for the supervisor's ``status()`` and its backend's gauges (the
    device plugin's kubelet watch)."""

    statuses: dict[str, PluginStatus] = field(default_factory=dict)
    watching: bool = True

    def status(self) -> Mapping[str, PluginStatus]:
        return self.statuses

    def gauges(self) -> tuple[Gauge, ...]:
        return (Gauge("genericdp_kubelet_watch_up", "watched", 1 if self.watching else 0),)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def result(*, returncode: int | None = 0, timed_out: bool = False) -> ExecResult:
    return ExecResult(
        argv=("x",), returncode=returncode, timed_out=timed_out, output="", duration=0.5, error=None
    )


def test_each_metrics_owns_its_registry() -> None:
    """Two Metrics count apart, and nothing lands in prometheus_client's global registry."""
    a, b = Metrics(), Metrics()
    a.registration(SERIAL, ok=True)
    assert value(a, "genericdp_registrations_total", resource=SERIAL, result="ok") == 1
    assert value(b, "genericdp_registrations_total", resource=SERIAL, result="ok") is None
    assert REGISTRY.get_sample_value("genericdp_build_info", {"version": __version__}) is None


def test_build_info_and_process_metrics() -> None:
    """build_info carries the version; process metrics are there unless turned off."""
    metrics = Metrics(version="9.9.9")
    assert value(metrics, "genericdp_build_info", version="9.9.9") == 1
    assert value(metrics, "process_resident_memory_bytes") is not None
    bare = Metrics(process=False)
    assert value(bare, "process_resident_memory_bytes") is None


def test_registrations_and_allocations_are_counted_per_resource() -> None:
    """Registrations and allocations count by resource and result; Allocate time is observed."""
    metrics = Metrics()
    metrics.registration(SERIAL, ok=False)
    metrics.registration(SERIAL, ok=True)
    metrics.allocation(SERIAL, "ok", 0.002)
    metrics.allocation(SERIAL, "hook_failed", 1.5)
    metrics.allocation("example.com/other", "invalid", 0.001)
    assert value(metrics, "genericdp_registrations_total", resource=SERIAL, result="ok") == 1
    assert value(metrics, "genericdp_registrations_total", resource=SERIAL, result="error") == 1
    assert value(metrics, "genericdp_allocations_total", resource=SERIAL, result="ok") == 1
    assert value(metrics, "genericdp_allocations_total", resource=SERIAL, result="hook_failed") == 1
    assert value(metrics, "genericdp_allocate_duration_seconds_count", resource=SERIAL) == 2
    assert value(metrics, "genericdp_allocate_duration_seconds_sum", resource=SERIAL) == 1.502
    other = "example.com/other"
    assert value(metrics, "genericdp_allocations_total", resource=other, result="invalid") == 1


def test_a_resource_counters_start_at_zero() -> None:
    """After a resource's first event, its other results exist at 0 (rate() sees the first)."""
    metrics = Metrics()
    metrics.registration(SERIAL, ok=True)
    for outcome in ("ok", "invalid", "hook_failed", "render_failed", "cdi_failed", "error"):
        assert value(metrics, "genericdp_allocations_total", resource=SERIAL, result=outcome) == 0
    assert value(metrics, "genericdp_registrations_total", resource=SERIAL, result="error") == 0


def test_hooks_probes_and_kubelet_restarts() -> None:
    """Hook runs count by hook and result, probes by result, kubelet restarts in total."""
    metrics = Metrics()
    metrics.hook_run(SERIAL, "init", "timeout", 10.0)
    metrics.health_probe(SERIAL, "failed", 0.01)
    metrics.health_probe(SERIAL, "ok", 0.01)
    metrics.kubelet_restart()
    metrics.kubelet_restart()
    labels = {"resource": SERIAL, "hook": "init"}
    assert value(metrics, "genericdp_hook_runs_total", **labels, result="timeout") == 1
    assert value(metrics, "genericdp_hook_duration_seconds_count", **labels) == 1
    assert value(metrics, "genericdp_health_probes_total", resource=SERIAL, result="failed") == 1
    assert value(metrics, "genericdp_health_probe_duration_seconds_count", resource=SERIAL) == 2
    assert value(metrics, "genericdp_kubelet_restarts_seen_total") == 2


def test_dra_claims_are_counted_by_driver_and_result_and_timed() -> None:
    """Prepared and unprepared claims count by result (all at 0 from the first); both timed."""
    metrics = Metrics()
    driver = "genericdp.io"
    assert value(metrics, "genericdp_dra_prepares_total", driver=driver, result="ok") is None
    metrics.claim_prepare(driver, "ok", 0.02)
    metrics.claim_prepare(driver, "hook_failed", 3.0)
    metrics.claim_unprepare(driver, "ok", 0.5)
    for result in CLAIM_RESULTS:
        expected = 1 if result in ("ok", "hook_failed") else 0
        assert value(metrics, "genericdp_dra_prepares_total", driver=driver, result=result) == (
            expected
        )
        expected = 1 if result == "ok" else 0
        assert value(metrics, "genericdp_dra_unprepares_total", driver=driver, result=result) == (
            expected
        )
    assert value(metrics, "genericdp_dra_prepare_duration_seconds_count", driver=driver) == 2
    assert value(metrics, "genericdp_dra_prepare_duration_seconds_sum", driver=driver) == 3.02
    assert value(metrics, "genericdp_dra_unprepare_duration_seconds_count", driver=driver) == 1


def test_config_reloads() -> None:
    """Reloads count by result; success time and flag follow applied/unchanged, not refused."""
    now = [100.0]
    metrics = Metrics(clock=lambda: now[0])
    for outcome in ("applied", "unchanged", "refused", "failed"):
        assert value(metrics, "genericdp_config_reloads_total", result=outcome) == 0
    metrics.config_at_start("config")
    assert value(metrics, "genericdp_config_last_reload_success_timestamp_seconds") == 100.0
    now[0] = 200.0
    metrics.config_reload("applied")
    now[0] = 300.0
    metrics.config_reload("refused")
    assert value(metrics, "genericdp_config_reloads_total", result="applied") == 1
    assert value(metrics, "genericdp_config_reloads_total", result="refused") == 1
    assert value(metrics, "genericdp_config_last_reload_success_timestamp_seconds") == 200.0
    assert value(metrics, "genericdp_config_last_reload_successful") == 0
    metrics.config_reload("unchanged")
    assert value(metrics, "genericdp_config_last_reload_successful") == 1
    assert value(metrics, "genericdp_config_last_reload_success_timestamp_seconds") == 300.0


def test_status_is_read_at_scrape_time() -> None:
    """Devices by health, units, registration, streams and the watch come from status()."""
    metrics = Metrics()
    source = Source({SERIAL: status(devices=4, healthy=3, units=2, streams=1)})
    metrics.track(source)
    assert value(metrics, "genericdp_devices", resource=SERIAL, health="healthy") == 3
    assert value(metrics, "genericdp_devices", resource=SERIAL, health="unhealthy") == 1
    assert value(metrics, "genericdp_units", resource=SERIAL) == 2
    assert value(metrics, "genericdp_registered", resource=SERIAL) == 1
    assert value(metrics, "genericdp_list_and_watch_streams", resource=SERIAL) == 1
    assert value(metrics, "genericdp_kubelet_watch_up") == 1
    source.statuses = {SERIAL: status(registered=False, healthy=4)}
    source.watching = False
    assert value(metrics, "genericdp_registered", resource=SERIAL) == 0
    assert value(metrics, "genericdp_devices", resource=SERIAL, health="unhealthy") == 0
    assert value(metrics, "genericdp_kubelet_watch_up") == 0
    source.statuses = {}
    assert value(metrics, "genericdp_units", resource=SERIAL) is None  # a removed resource


def test_exposition_parses_with_every_family() -> None:
    """The exposition is valid Prometheus text with every genericdp family present."""
    metrics = Metrics()
    metrics.track(Source({SERIAL: status()}))
    metrics.registration(SERIAL, ok=True)
    metrics.allocation(SERIAL, "ok", 0.01)
    metrics.hook_run(SERIAL, "init", "ok", 0.01)
    metrics.health_probe(SERIAL, "ok", 0.01)
    metrics.kubelet_restart()
    metrics.claim_prepare("genericdp.io", "ok", 0.01)
    metrics.claim_unprepare("genericdp.io", "ok", 0.01)
    families = {f.name for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert {
        "genericdp_build_info",
        "genericdp_devices",
        "genericdp_units",
        "genericdp_registered",
        "genericdp_list_and_watch_streams",
        "genericdp_kubelet_watch_up",
        "genericdp_registrations",
        "genericdp_allocations",
        "genericdp_allocate_duration_seconds",
        "genericdp_hook_runs",
        "genericdp_hook_duration_seconds",
        "genericdp_health_probes",
        "genericdp_health_probe_duration_seconds",
        "genericdp_config_reloads",
        "genericdp_config_last_reload_successful",
        "genericdp_config_last_reload_success_timestamp_seconds",
        "genericdp_kubelet_restarts_seen",
        "genericdp_dra_prepares",
        "genericdp_dra_prepare_duration_seconds",
        "genericdp_dra_unprepares",
        "genericdp_dra_unprepare_duration_seconds",
    } <= families


class BothBackends(Source):
    """A source exporting the gauges of the device-plugin backend and of the DRA one."""

    def __init__(self, dra: DraBackend, statuses: dict[str, PluginStatus]) -> None:
        super().__init__(statuses)
        self.dra = dra

    def gauges(self) -> tuple[Gauge, ...]:
        # The supervisor's own, as it adds them to its backend's.
        return (*super().gauges(), *self.dra.gauges(), Owed(None).gauge())


def test_every_metric_is_in_the_docs_table(tmp_path: Path) -> None:
    """docs/contributing/architecture.md lists every genericdp_ family, as exposed
    (counters with _total)."""
    metrics = Metrics(process=False)
    settings = settings_for(tmp_path, backend="dra", node_name=NODE)

    async def no_hook(hook: object) -> None:  # noqa: ARG001 -- the HookRunner signature
        return None

    dra = DraBackend(
        settings,
        claims=MemoryClaims(),
        publisher=SlicePublisher(MemorySlices()),
        run_hook=no_hook,
    )
    metrics.track(BothBackends(dra, {SERIAL: status()}))
    metrics.registration(SERIAL, ok=True)
    metrics.allocation(SERIAL, "ok", 0.01)
    metrics.hook_run(SERIAL, "init", "ok", 0.01)
    metrics.health_probe(SERIAL, "ok", 0.01)
    metrics.claim_prepare("genericdp.io", "ok", 0.01)
    metrics.claim_unprepare("genericdp.io", "ok", 0.01)
    docs = Path(__file__).resolve().parent.parent / "docs" / "contributing" / "architecture.md"
    listed = set(re.findall(r"^\| `(genericdp_\w+)` \|", docs.read_text(), re.MULTILINE))
    classes = ClassMetrics(process=False)
    classes.track(SyncStatus, lambda: False)
    exposed = {
        f"{f.name}_total" if f.type == "counter" else f.name
        for text in (metrics.exposition(), classes.exposition())
        for f in text_string_to_metric_families(text.decode())
        # prometheus_client's *_created series are families of their own in this format.
        if f.name.startswith("genericdp_") and not f.name.endswith("_created")
    }
    assert exposed == listed


def test_tracking_one_source_twice_is_refused() -> None:
    """Two status collectors in one registry would duplicate series: the registry refuses."""
    metrics = Metrics()
    metrics.track(Source())
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        metrics.track(Source())


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (None, "ok"),
        (InvalidDevicesError("unknown device IDs: x"), "invalid"),
        (HookError("init hook failed"), "hook_failed"),
        (TemplateRenderError("bad"), "render_failed"),
        (CdiSpecError("cannot write /var/run/cdi/x.json"), "cdi_failed"),
        (RuntimeError("bug"), "error"),
    ],
)
def test_allocation_result(exc: BaseException | None, expected: str) -> None:
    """Each Allocate failure maps to its result label."""
    assert allocation_result(exc) == expected


def test_exec_result() -> None:
    """A probe or hook result is ok, timeout or failed (exit, signal, could not start)."""
    assert exec_result(result()) == "ok"
    assert exec_result(result(returncode=3)) == "failed"
    assert exec_result(result(returncode=-9)) == "failed"
    assert exec_result(result(returncode=None, timed_out=True)) == "timeout"


@dataclass
class ScriptedHook:
    """A HookRunner that returns or raises what it is told."""

    raises: Exception | None = None
    calls: list[str] = field(default_factory=list)

    async def __call__(self, hook: HookRun) -> object:
        self.calls.append(hook.name)
        if self.raises is not None:
            raise self.raises
        return "done"


@pytest.mark.parametrize(
    ("raises", "expected"),
    [
        (None, "ok"),
        (HookRunError("init hook exited 3", result(returncode=3)), "failed"),
        (HookRunError("init hook timed out", result(returncode=-15, timed_out=True)), "timeout"),
        (RuntimeError("bug in a stand-in"), "failed"),
    ],
)
async def test_timed_hooks_record_and_pass_through(raises: Exception | None, expected: str) -> None:
    """TimedHooks records result and duration of every run and returns or raises as before."""
    ticks = iter([10.0, 12.5])
    metrics = Metrics()
    hooks = TimedHooks(ScriptedHook(raises), metrics, clock=lambda: next(ticks))
    if raises is None:
        assert await hooks(HookRun("init", SPEC, resource=SERIAL, units=())) == "done"
    else:
        with pytest.raises(type(raises)):
            await hooks(HookRun("init", SPEC, resource=SERIAL, units=()))
    labels = {"resource": SERIAL, "hook": "init"}
    assert value(metrics, "genericdp_hook_runs_total", **labels, result=expected) == 1
    assert value(metrics, "genericdp_hook_duration_seconds_sum", **labels) == 2.5


def test_liveness_is_always_ok() -> None:
    """/healthz fails only by not answering: a restart cures nothing else we know."""
    assert liveness().ok


def test_readiness() -> None:
    """Ready once started and every resource registered once; the reason lists the others."""
    assert not readiness({}, started=False).ok
    assert readiness({}, started=True).ok  # a config with no resources
    waiting = status("example.com/b", registered=False, registrations=0, last_error="no kubelet")
    verdict = readiness({SERIAL: status(), "example.com/b": waiting}, started=True)
    assert not verdict.ok
    assert "example.com/b: no kubelet" in verdict.text
    assert SERIAL not in verdict.text
    # Registered once, then the kubelet restarted: still ready (it re-registers by itself).
    again = status(registered=False, registrations=1, last_error="waiting for the kubelet")
    assert readiness({SERIAL: again}, started=True).ok
