"""Observability end to end: the supervisor with metrics against an embedded kubelet,
scraped over HTTP, and ``genericdp serve`` as a real process."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.httpserver import HttpServer
from genericdp.metrics import Metrics
from genericdp.probes import readiness, routes
from genericdp.runtime.supervisor import Supervisor, all_registered
from genericdp.settings import ListenAddress
from tests.fakesys import FakeHost
from tests.hostenv import own_env
from tests.kubelet_fakes import EmbeddedKubelet
from tests.runtime_harness import (
    ScriptedDiscovery,
    allocate_request,
    config,
    plugin_stub,
    settings_for,
    unit,
)
from tests.test_httpserver import Reply, get

SERIAL = "example.com/serial"
HOOKED = "example.com/hooked"
PROBED = "example.com/probed"
CONFIG = f"""\
resources:
- name: {SERIAL}
  match: [glob: /dev/ttyUSB*]
  count: 2
- name: {HOOKED}
  match: [glob: /dev/ttyACM*]
  hooks:
    init: {{exec: [/bin/sh, -c, 'echo no port; exit 3'], timeout: 5s}}
- name: {PROBED}
  match: [glob: /dev/probe*]
  health: {{exec: [/bin/sh, -c, 'exit 1'], interval: 1s, timeout: 150ms, failureThreshold: 1}}
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(reply: Reply) -> Samples:
    """Every sample of a /metrics answer, keyed by name and labels."""
    assert reply.status == 200, reply.body
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(reply.body.decode())
        for s in family.samples
    }


def sample(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, frozenset(labels.items())))


@dataclass
class Observed:
    supervisor: Supervisor
    kubelet: EmbeddedKubelet
    port: int

    def socket(self, name: str) -> Path:
        path = self.supervisor.status()[name].socket
        assert path is not None, f"{name} is not serving"
        return path


@asynccontextmanager
async def observed(base: Path, discovery: ScriptedDiscovery) -> AsyncIterator[Observed]:
    """A supervisor with metrics and the HTTP endpoints; the kubelet is not started yet."""
    settings = settings_for(base)
    settings.plugin_dir.mkdir(parents=True)
    metrics = Metrics(process=False)
    supervisor = Supervisor(
        settings, DevicePluginBackend(settings), discover=discovery, metrics=metrics
    )
    metrics.track(supervisor)
    started = asyncio.Event()
    server = HttpServer(
        routes(metrics, lambda: readiness(supervisor.status(), started=started.is_set()))
    )
    await server.start(ListenAddress("127.0.0.1", 0))
    ((_, port),) = server.addresses
    kubelet = EmbeddedKubelet(settings.plugin_dir)
    try:
        assert (await get(port, "/readyz")).body == b"not ready: starting\n"
        await supervisor.start(config(CONFIG))
        started.set()
        yield Observed(supervisor, kubelet, port)
    finally:
        await kubelet.stop()
        stragglers = await supervisor.stop()
        await server.close()
        assert stragglers == ()


async def test_readyz_waits_for_every_resource_to_register(base: Path) -> None:
    """/readyz is 503 naming each unregistered resource and why, then 200 once all registered."""
    discovery = ScriptedDiscovery({SERIAL: [unit("ttyUSB0")]})
    async with observed(base, discovery) as obs:
        await obs.supervisor.wait_for(lambda s: all(x.last_error for x in s.values()))
        reply = await get(obs.port, "/readyz")
        assert reply.status == 503
        text = reply.body.decode()
        assert "3 of 3 resource(s) never registered" in text
        for name in (SERIAL, HOOKED, PROBED):
            assert f"{name}: waiting for the kubelet" in text
        assert (await get(obs.port, "/healthz")).status == 200
        await obs.kubelet.start()
        await obs.supervisor.wait_for(all_registered())
        reply = await get(obs.port, "/readyz")
        assert (reply.status, reply.body) == (200, b"ready: 3 resource(s) registered\n")


async def test_metrics_count_registrations_allocations_hooks_and_probes(base: Path) -> None:
    """After registration, allocations and a failing init hook, /metrics counts per resource."""
    discovery = ScriptedDiscovery(
        {
            SERIAL: [unit("ttyUSB0"), unit("ttyUSB1")],
            HOOKED: [unit("ttyACM0")],
            PROBED: [unit("probe0")],
        }
    )
    async with observed(base, discovery) as obs:
        await obs.supervisor.wait_for(lambda s: all(x.last_error for x in s.values()))
        await obs.kubelet.start()  # a kubelet (re)start: kubelet.sock created
        await obs.supervisor.wait_for(all_registered())
        await obs.kubelet.wait_until(lambda k: k.resources[SERIAL].allocatable == 4)
        await obs.kubelet.allocate(SERIAL, 1, pod="p")
        async with plugin_stub(obs.socket(HOOKED)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.Allocate(allocate_request("ttyACM0"))
        assert failed.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        async with plugin_stub(obs.socket(SERIAL)) as stub:
            with pytest.raises(grpc.aio.AioRpcError) as invalid:
                await stub.Allocate(allocate_request("nope"))
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await obs.kubelet.wait_until(lambda k: k.resources[PROBED].allocatable == 0)
        statuses = obs.supervisor.status()

        found = samples(await get(obs.port, "/metrics"))

    def at(name: str, **labels: str) -> float | None:
        return sample(found, name, **labels)

    assert at("genericdp_devices", resource=SERIAL, health="healthy") == 4
    assert at("genericdp_devices", resource=SERIAL, health="unhealthy") == 0
    assert at("genericdp_devices", resource=PROBED, health="unhealthy") == 1
    assert at("genericdp_units", resource=SERIAL) == 2
    for name in (SERIAL, HOOKED, PROBED):
        assert at("genericdp_registered", resource=name) == 1
        ok = at("genericdp_registrations_total", resource=name, result="ok")
        assert ok == statuses[name].registrations
        assert (at("genericdp_registrations_total", resource=name, result="error") or 0) >= 1
    assert at("genericdp_allocations_total", resource=SERIAL, result="ok") == 1
    assert at("genericdp_allocations_total", resource=SERIAL, result="invalid") == 1
    assert at("genericdp_allocations_total", resource=HOOKED, result="hook_failed") == 1
    assert at("genericdp_allocations_total", resource=HOOKED, result="ok") == 0
    assert at("genericdp_allocate_duration_seconds_count", resource=SERIAL) == 2
    assert at("genericdp_hook_runs_total", resource=HOOKED, hook="init", result="failed") == 1
    assert at("genericdp_hook_duration_seconds_count", resource=HOOKED, hook="init") == 1
    assert (at("genericdp_health_probes_total", resource=PROBED, result="failed") or 0) >= 1
    assert at("genericdp_kubelet_restarts_seen_total") == 1
    assert at("genericdp_kubelet_watch_up") == 1
    # Low cardinality: resources and outcomes in labels, never device or unit IDs, pods.
    values = {v for _, labels in found for _, v in labels}
    assert not {v for v in values if re.search(r"ttyUSB|ttyACM|probe0|^p$", v)}


# -- genericdp serve, a real process -------------------------------------------------

SERVE_CONFIG = """\
version: v1
resources:
  - name: example.com/null
    match: [glob: /dev/null]
    count: 2
"""


def serve_argv(base: Path) -> list[str]:
    host = FakeHost(base / "host")
    host.add_plain("/dev/null")
    cfg = base / "config.yaml"
    cfg.write_text(SERVE_CONFIG)
    return [
        sys.executable, "-m", "genericdp", "serve",
        "--config", str(cfg),
        "--plugin-dir", str(base / "dp"),
        "--pod-resources-socket", str(base / "pod-resources.sock"),
        "--state-dir", str(base / "state"),
        *host.root_flags(),
    ]  # fmt: skip


def serve_env(metrics_address: str) -> dict[str, str]:
    env = own_env()
    env["GENERICDP_METRICS_ADDRESS"] = metrics_address
    return env


async def wait_for_log(log: Path, pattern: str, timeout: float = 20.0) -> re.Match[str]:  # noqa: ASYNC109
    """Poll the daemon's log file until ``pattern`` appears."""
    async with asyncio.timeout(timeout):
        while True:
            text = await asyncio.to_thread(log.read_text)
            found = re.search(pattern, text)
            if found is not None:
                return found
            await asyncio.sleep(0.05)


@asynccontextmanager
async def daemon(base: Path, metrics_address: str) -> AsyncIterator[Path]:
    """``genericdp serve`` with an embedded kubelet; yields its log file; SIGTERM at the end."""
    log = base / "serve.log"
    async with EmbeddedKubelet(base / "dp") as kubelet:
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                *serve_argv(base), env=serve_env(metrics_address), stdout=out, stderr=out
            )
        try:
            await kubelet.wait_until(
                lambda k: (
                    "example.com/null" in k.resources
                    and k.resources["example.com/null"].allocatable == 2
                ),
                timeout=20,
            )
            yield log
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0, log.read_text()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_serve_answers_metrics_and_probes(base: Path) -> None:
    """`genericdp serve` serves /metrics, /healthz and /readyz on its metrics address."""
    async with daemon(base, "127.0.0.1:0") as log:
        found = await wait_for_log(log, r"serving /metrics, /healthz and /readyz on [\d.]+:(\d+)")
        port = int(found.group(1))
        async with asyncio.timeout(10):
            while (ready := await get(port, "/readyz")).status != 200:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        assert ready.body == b"ready: 1 resource(s) registered\n"
        assert (await get(port, "/healthz")).status == 200
        metrics = samples(await get(port, "/metrics"))
        null = {"resource": "example.com/null"}
        assert sample(metrics, "genericdp_devices", **null, health="healthy") == 2
        assert sample(metrics, "genericdp_registered", **null) == 1
        assert sample(metrics, "genericdp_config_last_reload_successful") == 1
        assert sample(metrics, "process_resident_memory_bytes")


async def test_serve_keeps_serving_devices_when_the_port_is_taken(base: Path) -> None:
    """A metrics port in use is logged and retried; the device plugin registers regardless."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with daemon(base, f"127.0.0.1:{port}") as log:
            await wait_for_log(log, rf"task http failed: cannot listen on 127.0.0.1:{port}")


def test_bad_metrics_address_is_a_usage_error(base: Path) -> None:
    """A malformed GENERICDP_METRICS_ADDRESS exits 2 naming the setting and the problem."""
    import subprocess

    done = subprocess.run(
        serve_argv(base), env=serve_env("::1:9090"), capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "metrics_address" in done.stderr
    assert "IPv6 addresses go in brackets" in done.stderr
    assert "Traceback" not in done.stderr
