"""``genericdp serve``: load the config, run the supervisor until SIGTERM/SIGINT.

An invalid config at start does not stop it (a crash loop would be rolled out to
every node): it serves the last good config (``lastgood``), or nothing, not ready
until the config is fixed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from genericdp.aio import Backoff, StopSignals, TaskSet
from genericdp.config.loader import Source, load_sources
from genericdp.config.model import Config
from genericdp.discovery.model import Roots
from genericdp.discovery.roots import root_notes
from genericdp.errors import ConfigError
from genericdp.exits import EXIT_OK
from genericdp.hooks.reaper import SUBREAPER
from genericdp.httpserver import run_http_server
from genericdp.lastgood import LastGood, Reading
from genericdp.metrics import Metrics
from genericdp.probes import Verdict, readiness, routes, with_config_problem
from genericdp.settings import ListenAddress, Settings

if TYPE_CHECKING:
    from genericdp.hooks import HookRunner
    from genericdp.runtime.backend import Backend
    from genericdp.runtime.configwatch import ReloadResult
    from genericdp.runtime.recorder import Recorder
    from genericdp.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)

# Worker threads of the loop's executor: asyncio's default is the core count + 4,
# and each thread costs its stack and a malloc arena.
WORKER_THREADS = 2
# Issues of an invalid config shown in /readyz (the log has them all).
READYZ_ISSUES = 10


class Serving(Protocol):
    """Every backend package's ``serving``: its ``Backend``, opened and closed around a run."""

    def __call__(
        self, settings: Settings, *, run_hook: HookRunner, recorder: Recorder
    ) -> AbstractAsyncContextManager[Backend]: ...


def backend_serving(name: str) -> Serving:
    """``serving`` of ``genericdp.<name>.backend``, the name without its dashes, loaded
    only when chosen (the device-plugin backend never loads DRA or the API client)."""
    from importlib import import_module

    module = import_module(f"genericdp.{backend_package(name)}.backend")
    return cast("Serving", module.serving)


def backend_package(name: str) -> str:
    """The package of the backend named ``name``: ``device-plugin`` -> ``deviceplugin``."""
    return name.replace("-", "")


@dataclass
class StartingConfig:
    """What ``serve`` starts with: the config, or what stands in for an invalid one."""

    config: Config
    sources: tuple[Source, ...] = ()  # what to keep once applied: the config's own files
    refused: tuple[str, ...] = ()  # the config's issues, when it was invalid
    source: str = "config"  # what is served (metrics.CONFIG_SOURCES)
    problem: str | None = None  # why not ready, until the config is fixed

    def still_invalid(self, issues: tuple[str, ...]) -> None:
        """A reload refused the config again: /readyz shows its new issues."""
        if self.problem is not None:
            head = self.problem.splitlines()[0]
            self.problem = _problem_text(head, issues)


def starting_config(settings: Settings, store: LastGood | None) -> StartingConfig:
    """The config at ``settings.config``, or when invalid the last good one in ``store``."""
    try:
        config, sources = load_sources([settings.config])
    except ConfigError as exc:
        refused = tuple(str(i) for i in exc.issues)
    else:
        return StartingConfig(config, sources)
    reading = store.read() if store is not None else Reading()
    if reading.problem is not None:
        log.error("the last good config is refused: %s", reading.problem)
    issues = "; ".join(refused)
    if reading.kept is not None and store is not None:
        kept = reading.kept
        log.error(
            "config refused at start, serving the last good config (applied %s, kept in %s)"
            " until it is fixed: %s",
            kept.when, store.path, issues,
        )  # fmt: skip
        head = (
            f"the config at {settings.config} is invalid; serving the last good config,"
            f" applied {kept.when}"
        )
        return StartingConfig(kept.config, (), refused, "last_good", _problem_text(head, refused))
    if store is None:
        why = "GENERICDP_STATE_DIR is empty: none is kept"
    elif reading.problem is not None:
        why = "the one kept is refused"
    else:
        why = f"none kept in {store.directory}"
    log.error("config refused at start, serving nothing until it is fixed (%s): %s", why, issues)
    head = (
        f"the config at {settings.config} is invalid; serving nothing (no last good config: {why})"
    )
    return StartingConfig(Config(()), (), refused, "none", _problem_text(head, refused))


def _problem_text(head: str, issues: tuple[str, ...]) -> str:
    lines = [head, *issues[:READYZ_ISSUES]]
    if len(issues) > READYZ_ISSUES:
        lines.append(f"... and {len(issues) - READYZ_ISSUES} more problem(s): see the log")
    return "\n".join(lines)


async def serve(settings: Settings, *, ready: asyncio.Event | None = None) -> int:
    """Serve the config until SIGTERM or SIGINT; the exit code. ``ready`` is set once the
    plugins are started (they register in the background: the kubelet may not be up)."""
    from genericdp.runtime.supervisor import Supervisor

    store = LastGood(settings.state_path) if settings.state_path is not None else None
    start = starting_config(settings, store)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="genericdp")
    )
    metrics = Metrics()
    metrics.config_at_start(start.source)
    from genericdp.hooks import run_hook
    from genericdp.runtime.recorder import TimedHooks

    serving, hooks = backend_serving(settings.backend), TimedHooks(run_hook, metrics)
    async with serving(settings, run_hook=hooks, recorder=metrics) as backend:
        labels = settings.static_node_labels
        supervisor = Supervisor(settings, backend, metrics=metrics, node_labels=labels)
        return await _serve(settings, start, supervisor, metrics, store, ready=ready)


async def _serve(
    settings: Settings,
    start: StartingConfig,
    supervisor: Supervisor,
    metrics: Metrics,
    store: LastGood | None,
    *,
    ready: asyncio.Event | None = None,
) -> int:
    from genericdp.runtime.configwatch import start_config_watch

    signals = StopSignals()
    # Orphans of hooks come to us, so nothing a hook starts outlives its timeout.
    SUBREAPER.enable(asyncio.get_running_loop())
    metrics.track(supervisor)
    watches = TaskSet(log)
    started = asyncio.Event()  # the config is applied: /readyz may say yes
    endpoints = TaskSet(log)  # stopped last: /healthz answers while the plugins stop
    roots = Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)
    serve_endpoints(
        endpoints,
        settings.metrics_listen,
        metrics,
        lambda: with_config_problem(
            readiness(
                supervisor.status(),
                started=started.is_set(),
                notes=[*root_notes(supervisor.config.resources, roots), *supervisor.notes()],
            ),
            start.problem,
        ),
    )

    node_watch = NodeLabelsWatch(watches, settings, supervisor)

    def reloaded(result: ReloadResult) -> None:
        metrics.config_reload(result.outcome)
        if result.ok and start.problem is not None:
            start.problem = None
            metrics.config_source("config")
            log.info("the config at %s is valid again and served", settings.config)
        elif not result.ok:
            start.still_invalid(result.issues)
        node_watch.start_if_needed()

    try:
        where = {"config": str(settings.config), "none": "no config"}.get(
            start.source, f"the last good config ({store.path if store else ''})"
        )
        log.info(
            "serving %d resource(s) from %s in %s",
            len(start.config.resources), where, supervisor.backend.where,
        )  # fmt: skip
        await supervisor.start(start.config, tidy=start.source != "none")
        started.set()
        if store is not None and start.sources:
            await asyncio.to_thread(store.keep, start.sources)
        node_watch.start_if_needed()
        publish_node_labels(watches, settings, supervisor, metrics)
        start_config_watch(  # hot reload
            watches, settings, supervisor, on_result=reloaded, store=store, refused=start.refused
        )
        if ready is not None:
            ready.set()
        log.info("received %s: shutting down", await signals.wait())
    finally:
        signals.remove()
        supervisor.shutting_down()  # the DRA slices stay for the next instance
        # No reload may start while the plugins stop.
        stragglers = (*await watches.stop(), *await supervisor.stop(), *await endpoints.stop())
        SUBREAPER.disable()
        if stragglers:
            log.warning("exiting with tasks still running: %s", ", ".join(stragglers))
    log.info("shut down cleanly")
    return EXIT_OK


class NodeLabelsWatch:
    """Task ``node-watch``, the Node's labels for ``nodeSelector``: started once some
    resource has a selector, unless ``node_labels`` gives them; without a way to the
    API server, says once that those resources are not served."""

    def __init__(self, tasks: TaskSet, settings: Settings, supervisor: Supervisor) -> None:
        self._tasks, self._settings, self._supervisor = tasks, settings, supervisor
        self._done = settings.static_node_labels is not None

    def start_if_needed(self) -> None:
        if self._done or not any(
            d.node_selector is not None for d in self._supervisor.config.resources
        ):
            return
        self._done = True
        settings = self._settings
        why = _no_api(settings)
        if why is not None:
            log.warning("resources with a nodeSelector are not served: %s", why)
            return
        from genericdp.nodelabels.nodewatch import watch_node_labels

        kubeconfig = Path(settings.kubeconfig) if settings.kubeconfig else None
        self._tasks.spawn(
            "node-watch",
            lambda: watch_node_labels(
                kubeconfig, settings.node_name, self._supervisor.set_node_labels
            ),
        )


def publish_node_labels(
    tasks: TaskSet, settings: Settings, supervisor: Supervisor, metrics: Metrics
) -> None:
    """Task ``node-features``: the resources' ``labels`` kept published as
    ``node_features`` says (a NodeFeature object, a features.d file), or nothing."""
    if settings.node_features == "off":
        return
    problem = settings.node_features_problem()
    if problem is None and settings.node_features == "nodefeature":
        problem = _no_api(settings)
    if problem is not None:
        log.warning("node labels are not published: %s", problem)
        return
    from genericdp.nodelabels import LabelFollower

    async def follow() -> None:
        if settings.node_features == "file":
            from genericdp.nodelabels.featuresfile import FeaturesFile

            sink = FeaturesFile(settings.node_features_file)
            await LabelFollower(supervisor, sink, settings.node_name, metrics).run()
            return
        from genericdp.nodelabels.nodefeature import node_feature_sink

        api = node_feature_sink(
            Path(settings.kubeconfig) if settings.kubeconfig else None,
            settings.node_name,
            settings.node_features_namespace,
            settings.node_features_owner,
        )
        try:
            await LabelFollower(supervisor, api, settings.node_name, metrics).run()
        finally:
            await api.close()

    tasks.spawn("node-features", follow, backoff=Backoff(maximum=30.0))


def _no_api(settings: Settings) -> str | None:
    """Why this daemon cannot read its Node object, or None."""
    if not settings.node_name:
        return "this node's labels are unknown: no node name (--node-name or GENERICDP_NODE_NAME)"
    if not settings.kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return (
            "this node's labels are unknown: no kubeconfig (--kubeconfig) and no service"
            " account (not in a pod)"
        )
    return None


def serve_endpoints(
    tasks: TaskSet, address: ListenAddress | None, metrics: Metrics, ready: Callable[[], Verdict]
) -> None:
    """Task ``http``: /metrics, /healthz and /readyz (none at ``address`` None)."""
    if address is None:
        log.info("metrics_address is empty: no /metrics, /healthz or /readyz")
        return
    table = routes(metrics, ready)
    tasks.spawn("http", lambda: run_http_server(address, table), backoff=Backoff(maximum=10.0))
