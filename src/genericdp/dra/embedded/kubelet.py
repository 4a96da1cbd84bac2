"""An in-process model of the kubelet's DRA side, as far as a DRA driver can tell.

What ``simulate --backend dra`` and the tests run. It follows the 1.34-1.37 kubelet:

- Plugin watcher (pkg/kubelet/pluginmanager: pluginwatcher/plugin_watcher.go,
  operationexecutor/operation_generator.go): the registry directory is walked
  at start and then watched; a unix socket whose name does not start with
  ``.`` is dialed (10 s), ``GetInfo`` is called (1 s), a type without handler
  is refused through ``NotifyRegistrationStatus(false, ...)``; an empty
  ``endpoint`` means the registration socket itself. A failed or refused
  registration is tried again (GetInfo again) after 0.5 s, 1 s, 2 s, ...
  while the socket stays (goroutinemap's backoff; seen on a real 1.36
  node). A socket removed deregisters the plugin; a socket created again at
  the same path deregisters the old one and registers anew.
- DRA handler (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go,
  dra_plugin.go): ``supported_versions`` must not be empty; the first entry
  the kubelet supports is chosen (``v1.DRAPlugin``, ``v1beta1.DRAPlugin`` on
  1.34+); none is an error, sent back through ``NotifyRegistrationStatus``
  with the kubelet's wording. An endpoint already registered for the driver
  is refused. Calls have a 45 s deadline. Rolling updates (1.33 and later):
  every registration of a driver from another socket is kept, calls go to
  the newest, and when one goes away to the newest left.
- Health (the ResourceHealthStatus gate): for each registered plugin that
  advertises a health service the kubelet knows (``pickHealthService``: the
  first of ``health_services`` found in ``supported_versions``; 1.37 knows
  ``v1.DRAResourceHealth`` then ``v1alpha1.DRAResourceHealth``),
  ``NodeWatchResources`` of that version on its endpoint; none advertised,
  no stream. The 1.36 kubelet (``KUBELET_1_36_HEALTH``,
  ``health_announced=False``) knows only v1alpha1 and opens it right after
  registration whatever ``supported_versions`` says (seen on 1.36.2). It is
  reopened every 5 s after it ends or fails (``wait.UntilWithContext``),
  except after UNIMPLEMENTED on 1.37 (the driver declines health: the kubelet
  stops watching); each report is stamped with the
  kubelet's clock, a device not reported for 30 s reads Unknown
  (healthinfo.go), and the driver's entries are dropped when its stream ends.
- Prepare (pkg/kubelet/cm/dra/manager.go): only claims not prepared yet are
  sent, in one call per driver; a claim's error, a result for a UID that was
  not asked, or claims left out fail the whole pod's preparation, and the pod
  worker tries again later (``prepare_pod`` retries with backoff, as pod
  syncs do). Unprepare: one call for the claims whose last pod is gone.
- Multiple allocations (KEP-5075, DRAConsumableCapacity on in 1.36): several
  claims may name the same device, and one claim the same device more than
  once; the kubelet keeps each claim's devices apart (its claim info cache
  is per claim) and every pod of every claim naming a device shows that
  device's health in its ``allocatedResourcesStatus`` (``claim_health``).
  Each prepared device keeps the ``share_id`` a v1 answer gives (``prepared``;
  None over v1beta1, which has no such field).

What happened is kept in a typed event log (``events``, stamped with an
injected ``clock``); tests wait for a state with ``wait_until``, woken by
each event and health report, never by polling. The registry directory is
read through inotify, as the kubelet's fsnotify does.

Known differences: pods are not real (``prepare_pod`` stands for admission,
``unprepare_pod`` for the end of the last pod using the claims); no
ResourceSlice wiping, which needs the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import grpc
from inotify_simple import INotify

from genericdp.aio import Changes, TaskSet, inotify_events, wait_event
from genericdp.dra.embedded.calls import node_prepare, node_unprepare
from genericdp.dra.embedded.health import HEALTH_API, health_entries
from genericdp.dra.embedded.registry import WATCH, plugin_channel, sockets
from genericdp.dra.embedded.state import (
    DeviceHealth,
    DraEvent,
    DraEventKind,
    DraKubeletError,
    Plugin,
    PreparedDevice,
    describe,
)
from genericdp.kubeletplugin.api import pluginregistration_pb2 as reg_pb
from genericdp.kubeletplugin.api import pluginregistration_pb2_grpc as reg_grpc
from genericdp.kubeletplugin.claims import ClaimRef

log = logging.getLogger(__name__)

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # servicesSupportedByKubelet
# healthServicesSupportedByKubelet of 1.37, most recent first (1.36: only v1alpha1).
KUBELET_HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
KUBELET_1_36_HEALTH = ("v1alpha1.DRAResourceHealth",)
DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
CALL_TIMEOUT = 45.0
HEALTH_RETRY = 5.0
HEALTH_TIMEOUT = 30.0
RETRY_FIRST = 0.5  # a failed registration is tried again after 0.5 s, 1 s, 2 s, ...
RETRY_CAP = 122.0  # goroutinemap's maximum (2 min 2 s)


class EmbeddedDraKubelet:
    """Watches ``registry_dir``; registers DRA plugins; prepares and unprepares claims."""

    def __init__(
        self,
        registry_dir: Path,
        *,
        services: Sequence[str] = KUBELET_SERVICES,
        health: bool = True,
        health_services: Sequence[str] = KUBELET_HEALTH_SERVICES,
        health_announced: bool = True,
        health_retry: float = HEALTH_RETRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry_dir = registry_dir
        self.services = tuple(services)
        self.health_enabled = health
        self.health_services = tuple(health_services)
        self.health_announced = health_announced  # False: opened whether advertised or not
        self._health_retry = health_retry
        self._clock = clock
        self._events: list[DraEvent] = []
        self._plugins: dict[str, list[Plugin]] = {}
        self._sockets: dict[str, tuple[int, int]] = {}  # socket path -> (inode, ctime)
        # socket path -> (attempts, next try on the loop's clock: the wait is real)
        self._retry: dict[str, tuple[int, float]] = {}
        self._health: dict[str, dict[tuple[str, str], DeviceHealth]] = {}
        self._prepared: dict[str, tuple[PreparedDevice, ...]] = {}  # claim UID -> devices
        self._tasks = TaskSet(log)
        self._inotify = contextlib.AsyncExitStack()  # the registry's watch, from ``start``
        self._changes = Changes()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Watch the registry directory: a socket created from now on is seen.

        Raises DraKubeletError when the directory cannot be watched.
        """
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        where = f"cannot watch {self.registry_dir}"
        stack = contextlib.AsyncExitStack()
        inotify, readable = await stack.enter_async_context(
            inotify_events(lambda exc: DraKubeletError(f"{where}: {exc}"))
        )
        try:
            inotify.add_watch(self.registry_dir, WATCH)
        except OSError as exc:
            await stack.aclose()
            raise DraKubeletError(f"{where}: {exc}") from exc
        self._inotify = stack
        self._tasks.spawn("dra-kubelet/watch", lambda: self._watch_dir(inotify, readable))
        self._record(DraEventKind.STARTED, "", f"watching {self.registry_dir}")

    async def stop(self) -> None:
        await self._tasks.stop()
        await self._inotify.aclose()
        for driver in list(self._plugins):
            for plugin in list(self._plugins[driver]):
                await self._drop(plugin)
        self._sockets.clear()
        self._record(DraEventKind.STOPPED, "", "stopped")

    # -- what tests look at ------------------------------------------------------

    def registered(self, driver: str) -> bool:
        return bool(self._plugins.get(driver))

    def chosen_service(self, driver: str) -> str | None:
        plugins = self._plugins.get(driver)
        return plugins[-1].service if plugins else None

    def health_service(self, driver: str) -> str | None:
        """The health version the kubelet watches the driver's newest plugin with, if any."""
        plugins = self._plugins.get(driver)
        return plugins[-1].health_service if plugins else None

    def device_health(self, driver: str) -> dict[tuple[str, str], tuple[str, str]]:
        """(pool, device) -> (health, message) as the kubelet reads them (timeouts applied)."""
        now = self._clock()
        return {
            key: (h.health, h.message) if now - h.seen <= HEALTH_TIMEOUT else ("Unknown", "")
            for key, h in self._health.get(driver, {}).items()
        }

    def prepared(self, uid: str) -> tuple[PreparedDevice, ...] | None:
        return self._prepared.get(uid)

    def claims_of(self, pool: str, device: str) -> tuple[str, ...]:
        """The UIDs of the prepared claims naming ``device`` of ``pool``, sorted."""
        return tuple(
            sorted(
                uid
                for uid, devices in self._prepared.items()
                if any((d.pool, d.device) == (pool, device) for d in devices)
            )
        )

    def claim_health(self, driver: str, uid: str) -> dict[str, tuple[str, str]]:
        """device -> (health, message) as a pod of claim ``uid`` shows them in its
        ``allocatedResourcesStatus``: a device not reported reads Unknown."""
        health = self.device_health(driver)
        return {
            d.device: health.get((d.pool, d.device), ("Unknown", ""))
            for d in self._prepared.get(uid, ())
        }

    @property
    def events(self) -> tuple[DraEvent, ...]:
        """The event log, oldest first."""
        return tuple(self._events)

    def count(self, kind: DraEventKind, driver: str | None = None) -> int:
        """How many events of ``kind`` (of ``driver``, if given) the log holds."""
        return sum(1 for e in self._events if e.kind is kind and driver in (None, e.driver))

    def describe(self) -> str:
        """The state in words, for timeouts and logs."""
        plugins = [p for plugins in self._plugins.values() for p in plugins]
        return describe(plugins, self._prepared, self._events)

    async def wait_until(
        self,
        predicate: Callable[[EmbeddedDraKubelet], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 -- the whole wait, re-armed on every change
    ) -> None:
        """Return once ``predicate(self)`` holds, checked again at every event and report.

        Raises TimeoutError describing the current state when it does not hold in time.
        """
        if not await self._changes.until(lambda: predicate(self), timeout):
            raise TimeoutError(
                f"embedded DRA kubelet: condition not met within {timeout}s\n{self.describe()}"
            )

    def _record(self, kind: DraEventKind, driver: str, detail: str) -> None:
        event = DraEvent(kind=kind, driver=driver, detail=detail, at=self._clock())
        self._events.append(event)
        log.info("embedded DRA kubelet: %s", event)
        self._changes.notify()

    # -- the plugin watcher ------------------------------------------------------

    async def _watch_dir(self, inotify: INotify, readable: asyncio.Event) -> None:
        """Walk the directory, then again at each change or when a retry is due."""
        while True:
            directories = await self._sync_dir()
            for directory in directories:  # new subdirectories: watched too
                with contextlib.suppress(OSError):
                    inotify.add_watch(directory, WATCH)
            due = min((at for _, at in self._retry.values()), default=None)
            wait = None if due is None else max(0.0, due - asyncio.get_running_loop().time())
            if await wait_event(readable, wait):
                readable.clear()
                inotify.read(timeout=0)

    async def _sync_dir(self) -> list[str]:
        """Register what appeared or is due a retry, deregister what went; the subdirectories."""
        try:
            found, directories = await asyncio.to_thread(sockets, self.registry_dir)
        except OSError as exc:
            log.warning("cannot read %s: %s", self.registry_dir, exc)
            found, directories = {}, []
        for path in set(self._sockets) - set(found):
            del self._sockets[path]
            await self._deregister(path)
        now = asyncio.get_running_loop().time()
        for path, ident in found.items():
            retry = self._retry.get(path)
            if self._sockets.get(path) != ident:
                if path in self._sockets:
                    await self._deregister(path)
                self._sockets[path] = ident
                retry = self._retry[path] = (0, now)
            if retry is None or retry[1] > now:
                continue
            try:
                done = await self._register(path)
            except Exception as exc:  # noqa: BLE001 -- the kubelet logs a failed registration and retries
                log.info("RegisterPlugin error at %s: %s", path, exc)
                done = False
            if done:
                del self._retry[path]
            else:  # goroutinemap's exponential backoff, while the socket stays
                attempt = retry[0] + 1
                delay = min(RETRY_FIRST * 2 ** (attempt - 1), RETRY_CAP)
                self._retry[path] = (attempt, now + delay)
        for path in set(self._retry) - set(found):
            del self._retry[path]
        return directories

    async def _register(self, socket: str) -> bool:
        """One RegisterPlugin operation; False when it failed (it is retried)."""
        async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
            async with asyncio.timeout(DIAL_TIMEOUT):
                await channel.channel_ready()
            stub = reg_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            info: reg_pb.PluginInfo = await stub.GetInfo(
                reg_pb.InfoRequest(), timeout=GET_INFO_TIMEOUT
            )
            if info.type != "DRAPlugin":
                await self._refuse(
                    stub,
                    info.name,
                    f"RegisterPlugin error -- no handler registered for plugin type: {info.type}"
                    f" at socket {socket}",
                )
                return False
            endpoint = info.endpoint or socket
            try:
                service = self._validate(info.name, endpoint, list(info.supported_versions))
                if any(p.endpoint == endpoint for p in self._plugins.get(info.name, [])):
                    raise DraKubeletError(
                        f"endpoint {endpoint} already registered for DRA driver plugin {info.name}"
                    )
            except DraKubeletError as exc:
                await self._refuse(
                    stub,
                    info.name,
                    f"RegisterPlugin error -- plugin validation failed with err: {exc}",
                )
                return False
            offered = list(info.supported_versions)
            known = [h for h in self.health_services if h in offered or not self.health_announced]
            health = known[0] if known else None
            plugin = Plugin(info.name, endpoint, service, socket, plugin_channel(endpoint), health)
            self._plugins.setdefault(info.name, []).append(plugin)
            if self.health_enabled and health is not None:
                self._tasks.spawn(
                    plugin.health_task, lambda: self._health_loop(plugin), finishable=True
                )
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT
            )
            self._record(DraEventKind.REGISTERED, info.name, f"{service} at {endpoint}")
            return True

    def _validate(self, driver: str, endpoint: str, offered: list[str]) -> str:
        where = f"DRA driver plugin {driver} at endpoint {endpoint}"
        if not offered:
            raise DraKubeletError(
                f"invalid supported gRPC versions of {where}: empty list of supported gRPC"
                " services (aka supported versions)"
            )
        for service in offered:
            if service in self.services:
                return service
        raise DraKubeletError(
            f"invalid supported gRPC versions of {where}: none of services supported by the"
            f" plugin ({offered}) are supported by the kubelet ({list(self.services)})"
        )

    async def _refuse(self, stub: Any, driver: str, message: str) -> None:
        with contextlib.suppress(grpc.RpcError):
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=False, error=message),
                timeout=NOTIFY_TIMEOUT,
            )
        self._record(DraEventKind.REFUSED, driver, message)  # once the plugin was told

    async def _deregister(self, socket: str) -> None:
        for plugins in list(self._plugins.values()):
            for plugin in list(plugins):
                if plugin.socket == socket:
                    await self._drop(plugin)
                    self._record(DraEventKind.DEREGISTERED, plugin.driver, f"{socket} gone")

    async def _drop(self, plugin: Plugin) -> None:
        plugins = self._plugins.get(plugin.driver, [])
        if plugin in plugins:
            plugins.remove(plugin)
        if not plugins:
            self._plugins.pop(plugin.driver, None)
        await self._tasks.cancel(plugin.health_task)
        await plugin.channel.close(None)

    # -- health --------------------------------------------------------------------

    async def _health_loop(self, plugin: Plugin) -> None:
        if plugin.health_service is None:
            raise RuntimeError("no loop without a chosen version")
        pb, pb_grpc = HEALTH_API[plugin.health_service]
        stub = pb_grpc.DRAResourceHealthStub(plugin.channel)
        where = f"{plugin.endpoint} ({plugin.health_service})"
        while True:
            declined = False
            try:
                stream = stub.NodeWatchResources(pb.NodeWatchResourcesRequest())
                self._record(DraEventKind.HEALTH_STREAM, plugin.driver, where)
                async for response in stream:
                    self._health_report(plugin.driver, response)
                ended = "ended by the plugin"
            except grpc.RpcError as exc:
                ended = f"failed: {exc.code().name}"
                declined = exc.code() is grpc.StatusCode.UNIMPLEMENTED
            finally:
                self._health.pop(plugin.driver, None)  # clearDriver on stream exit
                self._changes.notify()
            self._record(DraEventKind.HEALTH_ENDED, plugin.driver, ended)
            if declined:  # the driver declines health reporting: not watched again
                return
            await asyncio.sleep(self._health_retry)

    def _health_report(self, driver: str, response: Any) -> None:
        self._health.setdefault(driver, {}).update(health_entries(response, self._clock()))
        self._changes.notify()  # a report is no event: heartbeats would fill the log

    # -- prepare / unprepare -------------------------------------------------------

    def _plugin(self, driver: str) -> Plugin:
        plugins = self._plugins.get(driver)
        if not plugins:
            raise DraKubeletError(f"DRA driver {driver} is not registered")
        return plugins[-1]

    async def prepare(self, driver: str, claims: Sequence[ClaimRef]) -> None:
        """One pod sync: NodePrepareResources for the claims not prepared yet."""
        todo = [c for c in claims if c.uid not in self._prepared]
        if not todo:
            return
        plugin = self._plugin(driver)
        self._record(DraEventKind.PREPARE, driver, ", ".join(c.uid for c in todo))
        self._prepared.update(await node_prepare(plugin, todo, CALL_TIMEOUT))

    async def prepare_pod(
        self,
        driver: str,
        claims: Sequence[ClaimRef],
        *,
        attempts: int = 5,
        backoff: float = 0.05,
    ) -> list[str]:
        """Prepare as the pod worker does, retrying failed syncs; the pod's CDI IDs."""
        for attempt in range(attempts):
            try:
                await self.prepare(driver, claims)
                break
            except DraKubeletError:
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(backoff * 2**attempt)
        return [i for c in claims for d in self._prepared[c.uid] for i in d.cdi_ids]

    async def unprepare(self, driver: str, claims: Sequence[ClaimRef]) -> None:
        """NodeUnprepareResources for the claims; they are forgotten once it succeeds."""
        plugin = self._plugin(driver)
        self._record(DraEventKind.UNPREPARE, driver, ", ".join(c.uid for c in claims))
        for uid in await node_unprepare(plugin, claims, CALL_TIMEOUT):
            self._prepared.pop(uid, None)
