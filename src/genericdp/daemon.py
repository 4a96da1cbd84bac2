"""``genericdp serve``: load the config, run the supervisor until SIGTERM/SIGINT.

Shutdown ends the ListAndWatch streams, stops the servers (hooks that are
running get a short grace), removes our sockets and returns 0; tasks that do
not stop in time are named in the log rather than blocking the exit.
``/metrics``, ``/healthz`` and ``/readyz`` are served on ``metrics_address``
from the same loop (``genericdp.metrics``, ``serve_endpoints``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

from genericdp.aio import Backoff, TaskSet
from genericdp.config.model import Config
from genericdp.discovery.model import Roots
from genericdp.discovery.roots import root_notes
from genericdp.exits import EXIT_OK
from genericdp.httpserver import run_http_server
from genericdp.metrics import Metrics, Verdict, readiness, routes
from genericdp.reaper import SUBREAPER
from genericdp.settings import ListenAddress, Settings

if TYPE_CHECKING:
    from genericdp.hooks import HookRunner
    from genericdp.runtime.backend import Backend
    from genericdp.runtime.recorder import Recorder
    from genericdp.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Worker threads of the loop's executor (discovery, CDI files, a render past its
# slice). asyncio's default is the core count + 4 (up to 32 on a large node),
# and each thread costs its stack and a malloc arena (docs/performance.md).
WORKER_THREADS = 2


class Serving(Protocol):
    """Every backend package's ``serving``: its ``Backend``, opened and closed around a run."""

    def __call__(
        self, settings: Settings, *, run_hook: HookRunner, recorder: Recorder
    ) -> AbstractAsyncContextManager[Backend]: ...


def backend_serving(name: str) -> Serving:
    """The ``serving`` of the backend named ``name`` (``settings.backend``): the one
    place backends are chosen. Each is loaded only when chosen: the device-plugin
    backend never loads DRA or the API client."""
    if name == "dra":
        from genericdp.dra.backend import serving as dra

        return dra
    from genericdp.deviceplugin.backend import serving as device_plugin

    return device_plugin


def load_config(settings: Settings) -> Config:
    """The config at ``settings.config``; raises ConfigError (the CLI reports it)."""
    from genericdp.config import load

    return load([settings.config])


async def serve(settings: Settings, *, ready: asyncio.Event | None = None) -> int:
    """Serve every resource of the config until SIGTERM or SIGINT; return the exit code.

    ``ready`` is set once the plugins are started (registration goes on in
    the background: the kubelet may not be up yet). ``settings.backend``
    chooses who serves the resources (``backend_serving``): one device plugin
    each, or one DRA driver (``genericdp.dra``, loaded only then).
    """
    from genericdp.runtime.supervisor import Supervisor

    config = load_config(settings)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="genericdp")
    )
    metrics = Metrics()
    metrics.config_loaded()
    from genericdp.hooks import run_hook
    from genericdp.runtime.recorder import TimedHooks

    opened = backend_serving(settings.backend)
    async with opened(
        settings, run_hook=TimedHooks(run_hook, metrics), recorder=metrics
    ) as backend:
        supervisor = Supervisor(settings, backend, metrics=metrics)
        return await _serve(settings, config, supervisor, metrics, ready=ready)


async def _serve(
    settings: Settings,
    config: Config,
    supervisor: Supervisor,
    metrics: Metrics,
    *,
    ready: asyncio.Event | None = None,
) -> int:
    from genericdp.runtime.configwatch import start_config_watch

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[str] = []

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig.name)
        stop.set()

    for sig in _SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    # Orphans of hooks come to us, so nothing a hook starts outlives its timeout.
    SUBREAPER.enable(loop)
    metrics.track(supervisor)
    watches = TaskSet(log)
    started = asyncio.Event()  # the config is applied: /readyz may say yes
    endpoints = TaskSet(log)  # stopped last: /healthz answers while the plugins stop
    roots = Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)
    serve_endpoints(
        endpoints,
        settings.metrics_listen,
        metrics,
        lambda: readiness(
            supervisor.status(),
            started=started.is_set(),
            notes=root_notes(supervisor.config.resources, roots),
        ),
    )
    try:
        log.info(
            "serving %d resource(s) from %s in %s",
            len(config.resources),
            settings.config,
            supervisor.backend.where,
        )
        await supervisor.start(config)
        started.set()
        start_config_watch(  # hot reload
            watches, settings, supervisor, on_result=lambda r: metrics.config_reload(r.outcome)
        )
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("received %s: shutting down", received[0])
    finally:
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)
        supervisor.shutting_down()  # the DRA slices stay for the next instance
        # No reload may start while the plugins stop.
        stragglers = (*await watches.stop(), *await supervisor.stop(), *await endpoints.stop())
        SUBREAPER.disable()
        if stragglers:
            log.warning("exiting with tasks still running: %s", ", ".join(stragglers))
    log.info("shut down cleanly")
    return EXIT_OK


def serve_endpoints(
    tasks: TaskSet,
    address: ListenAddress | None,
    metrics: Metrics,
    ready: Callable[[], Verdict],
) -> None:
    """Spawn task ``http`` serving /metrics, /healthz and /readyz (None: turned off).

    The task retries with backoff when it cannot listen (the port of a rolling
    update's previous pod); the device plugins never wait for it.
    """
    if address is None:
        log.info("metrics_address is empty: no /metrics, /healthz or /readyz")
        return
    table = routes(metrics, ready)
    tasks.spawn("http", lambda: run_http_server(address, table), backoff=Backoff(maximum=10.0))
