"""``genericdp reconcile-classes``: the DeviceClasses kept equal to the config, until SIGTERM.

One process per cluster and driver (a Deployment; more replicas wait on the Lease). The
config is watched as ``serve`` watches it: a valid edit is applied, an invalid one
refused. A config invalid at start writes nothing (no class is deleted because of a
typo) until it is fixed, and /readyz says so. Readiness does not wait for the Lease, so a
rolling update's new pod becomes ready while the old one still holds it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path

from genericdp.aio import Backoff, StopSignals, TaskSet
from genericdp.config.loader import load_sources
from genericdp.deviceclasses.api import ClassApi
from genericdp.deviceclasses.metrics import ClassMetrics
from genericdp.deviceclasses.sync import ClassReconciler
from genericdp.errors import ConfigError, GenericdpError
from genericdp.exits import EXIT_OK
from genericdp.httpserver import run_http_server
from genericdp.kube.client import ApiSetupError, connect
from genericdp.kube.lease import LeaseElector, Leases
from genericdp.probes import Verdict, routes
from genericdp.runtime.configwatch import ReloadResult, start_config_watch
from genericdp.settings import ClassSettings

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: ClassSettings, path: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """The Lease's namespace: the setting, else the pod's own; raises ApiSetupError."""
    if settings.lease_namespace:
        return settings.lease_namespace
    try:
        return path.read_text().strip()
    except OSError as err:
        raise ApiSetupError(
            f"the Lease's namespace is unknown: no --lease-namespace and no {path} ({err.strerror})"
        ) from err


class Readiness:
    """/readyz: ready once a config is applied; not while the one at start is invalid."""

    def __init__(self, reconciler: ClassReconciler, elector: LeaseElector) -> None:
        self._reconciler, self._elector = reconciler, elector
        self.problem: str | None = None

    def __call__(self) -> Verdict:
        status = self._reconciler.status
        role = "leader" if self._elector.leading() else "standby (another replica holds the Lease)"
        if self.problem is not None:
            return Verdict(False, f"not ready: {self.problem}")
        lines = [f"ready: {role}"]
        if status.error and not status.ok:
            lines.append(f"last sync failed: {status.error}")
        lines += [f"{n}: held by a DeviceClass without our labels" for n in status.foreign]
        lines += [f"{n}: out of the config, kept while a node publishes it" for n in status.kept]
        return Verdict(True, "\n".join(lines))


async def reconcile_classes(settings: ClassSettings) -> int:
    """Keep the DeviceClasses equal to ``settings.config`` until SIGTERM or SIGINT."""
    namespace = lease_namespace(settings)
    kubeconfig = Path(settings.kubeconfig) if settings.kubeconfig else None
    client = connect(kubeconfig)
    try:
        return await _run(settings, ClassApi(client, driver=settings.dra_driver_name), namespace)
    finally:
        await client.close()


async def _first_config(
    settings: ClassSettings,
    reconciler: ClassReconciler,
    metrics: ClassMetrics,
    readiness: Readiness,
) -> tuple[str, ...]:
    """Apply the config at start; when it is invalid, its issues (and nothing applied)."""
    try:
        config, _ = await asyncio.to_thread(load_sources, [settings.config])
    except ConfigError as exc:
        refused = tuple(str(i) for i in exc.issues)
        invalid = f"the config at {settings.config} is invalid"
        readiness.problem = "\n".join(
            [f"{invalid}; no DeviceClass is written until it is fixed", *refused[:10]]
        )
        log.error(
            "config refused at start, nothing written until it is fixed: %s", "; ".join(refused)
        )
        metrics.config_loaded(ok=False)
        return refused
    await reconciler.apply(config)
    metrics.config_loaded(ok=True)
    return ()


async def _run(settings: ClassSettings, api: ClassApi, namespace: str) -> int:
    signals = StopSignals()
    metrics = ClassMetrics()
    reconciler: ClassReconciler | None = None
    elector = LeaseElector(
        Leases(api.client),
        namespace=namespace,
        name=settings.lease,
        identity=settings.identity or f"{socket.gethostname()}-{os.getpid()}",
        duration=settings.lease_duration,
        changed=lambda _leading: reconciler.wake() if reconciler else None,
    )
    reconciler = ClassReconciler(
        api, leading=elector.leading, resync=settings.resync_interval, recorder=metrics
    )
    metrics.track(lambda: reconciler.status, elector.leading)
    readiness = Readiness(reconciler, elector)
    tasks = TaskSet(log)
    endpoints = TaskSet(log)
    address = settings.metrics_listen
    if address is not None:
        table = routes(metrics, readiness)
        endpoints.spawn(
            "http", lambda: run_http_server(address, table), backoff=Backoff(maximum=10.0)
        )
    try:
        refused = await _first_config(settings, reconciler, metrics, readiness)

        def on_result(result: ReloadResult) -> None:
            metrics.config_reload(result.outcome)
            if result.ok:
                readiness.problem = None

        start_config_watch(tasks, settings, reconciler, on_result=on_result, refused=refused)
        log.info(
            "keeping the DeviceClasses of driver %s equal to %s (Lease %s/%s as %s)",
            settings.dra_driver_name, settings.config, namespace, elector.name, elector.identity,
        )  # fmt: skip
        restart = Backoff(maximum=10.0)
        tasks.spawn("lease", elector.run, backoff=restart)
        tasks.spawn("deviceclasses", reconciler.run, backoff=restart)
        tasks.spawn("watch/deviceclasses", lambda: reconciler.watch("classes"), backoff=restart)
        tasks.spawn("watch/resourceslices", lambda: reconciler.watch("slices"), backoff=restart)
        log.info("received %s: shutting down", await signals.wait())
    finally:
        signals.remove()
        stragglers = await tasks.stop()
        try:
            await elector.release()
        except GenericdpError as err:
            log.warning("%s", err)
        stragglers += await endpoints.stop()
        if stragglers:
            log.warning("exiting with tasks still running: %s", ", ".join(stragglers))
    log.info("shut down cleanly")
    return EXIT_OK
