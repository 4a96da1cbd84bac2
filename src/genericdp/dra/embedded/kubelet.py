"""An in-process model of the kubelet's DRA side, as far as a DRA driver can tell.

Used by the tests. It follows the 1.34-1.36 kubelet:

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
  is refused. Calls have a 45 s deadline.
- Health (the ResourceHealthStatus gate): for each registered plugin,
  ``NodeWatchResources`` on its endpoint, reopened every 5 s after it ends
  or fails (``wait.UntilWithContext``); each report is stamped with the
  kubelet's clock, a device not reported for 30 s reads Unknown
  (healthinfo.go), and the driver's entries are dropped when its stream ends.
- Prepare (pkg/kubelet/cm/dra/manager.go): only claims not prepared yet are
  sent, in one call per driver; a claim's error, a result for a UID that was
  not asked, or claims left out fail the whole pod's preparation, and the pod
  worker tries again later (``prepare_pod`` retries with backoff, as pod
  syncs do). Unprepare: one call for the claims whose last pod is gone.

Known differences: the directory is polled (every 50 ms) rather than read
through inotify; pods are not real (``prepare_pod`` stands for admission,
``unprepare_pod`` for the end of the last pod using the claims); no
ResourceSlice wiping, which needs the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from genericdp.aio import TaskSet
from genericdp.dra.api import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from genericdp.dra.api import drahealth_v1alpha1_pb2 as health_pb
from genericdp.dra.api import drahealth_v1alpha1_pb2_grpc as health_grpc
from genericdp.dra.api import pluginregistration_pb2 as reg_pb
from genericdp.dra.api import pluginregistration_pb2_grpc as reg_grpc
from genericdp.dra.claims import ClaimRef

log = logging.getLogger(__name__)

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # servicesSupportedByKubelet
DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
CALL_TIMEOUT = 45.0
HEALTH_RETRY = 5.0
HEALTH_TIMEOUT = 30.0
POLL = 0.05
RETRY_FIRST = 0.5  # a failed registration is tried again after 0.5 s, 1 s, 2 s, ...
RETRY_CAP = 122.0  # goroutinemap's maximum (2 min 2 s)


class DraKubeletError(Exception):
    """What the kubelet would report in the pod's events."""


@dataclass(frozen=True)
class PreparedDevice:
    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


@dataclass
class Plugin:
    driver: str
    endpoint: str
    service: str  # the chosen one
    socket: str  # its registration socket
    channel: grpc.aio.Channel

    @property
    def health_task(self) -> str:
        """The name of its health stream's task (endpoints are unique per driver)."""
        return f"dra-kubelet/health/{self.driver}@{self.endpoint}"


@dataclass
class DeviceHealth:
    health: str
    message: str
    seen: float  # the kubelet's clock


@dataclass
class Events:
    registered: list[str] = field(default_factory=list)  # driver names, in order
    refused: list[str] = field(default_factory=list)  # the kubelet's messages
    deregistered: list[str] = field(default_factory=list)
    prepare_calls: int = 0
    unprepare_calls: int = 0
    health_streams: int = 0


class EmbeddedDraKubelet:
    """Watches ``registry_dir``; registers DRA plugins; prepares and unprepares claims."""

    def __init__(
        self,
        registry_dir: Path,
        *,
        services: Sequence[str] = KUBELET_SERVICES,
        health: bool = True,
        health_retry: float = HEALTH_RETRY,
    ) -> None:
        self.registry_dir = registry_dir
        self.services = tuple(services)
        self.health_enabled = health
        self._health_retry = health_retry
        self.events = Events()
        self._plugins: dict[str, list[Plugin]] = {}
        self._sockets: dict[str, tuple[int, int]] = {}  # socket path -> (inode, ctime)
        self._retry: dict[str, tuple[int, float]] = {}  # socket path -> (attempts, next try)
        self._health: dict[str, dict[tuple[str, str], DeviceHealth]] = {}
        self._prepared: dict[str, tuple[PreparedDevice, ...]] = {}  # claim UID -> devices
        self._tasks = TaskSet(log)
        self._changed = asyncio.Event()

    async def __aenter__(self) -> EmbeddedDraKubelet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._tasks.spawn("dra-kubelet/watch", self._watch_dir)

    async def stop(self) -> None:
        await self._tasks.stop()
        for driver in list(self._plugins):
            for plugin in list(self._plugins[driver]):
                await self._drop(plugin)
        self._sockets.clear()

    # -- what tests look at ------------------------------------------------------

    def registered(self, driver: str) -> bool:
        return bool(self._plugins.get(driver))

    def chosen_service(self, driver: str) -> str | None:
        plugins = self._plugins.get(driver)
        return plugins[-1].service if plugins else None

    def device_health(self, driver: str) -> dict[tuple[str, str], tuple[str, str]]:
        """(pool, device) -> (health, message) as the kubelet reads them (timeouts applied)."""
        now = time.monotonic()
        return {
            key: (h.health, h.message) if now - h.seen <= HEALTH_TIMEOUT else ("Unknown", "")
            for key, h in self._health.get(driver, {}).items()
        }

    def prepared(self, uid: str) -> tuple[PreparedDevice, ...] | None:
        return self._prepared.get(uid)

    async def wait_changed(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    # -- the plugin watcher ------------------------------------------------------

    async def _watch_dir(self) -> None:
        while True:
            try:
                found = await asyncio.to_thread(_sockets, self.registry_dir)
            except OSError as exc:
                log.warning("cannot read %s: %s", self.registry_dir, exc)
                found = {}
            for path in set(self._sockets) - set(found):
                del self._sockets[path]
                await self._deregister(path)
            now = time.monotonic()
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
                except Exception as exc:
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
            await asyncio.sleep(POLL)

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
                    stub, f"RegisterPlugin error -- plugin validation failed with err: {exc}"
                )
                return False
            plugin = Plugin(info.name, endpoint, service, socket, _channel(endpoint))
            self._plugins.setdefault(info.name, []).append(plugin)
            if self.health_enabled:
                self._tasks.spawn(plugin.health_task, lambda: self._health_loop(plugin))
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT
            )
            self.events.registered.append(info.name)
            self._changed.set()
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

    async def _refuse(self, stub: Any, message: str) -> None:
        self.events.refused.append(message)
        self._changed.set()
        with contextlib.suppress(grpc.RpcError):
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=False, error=message),
                timeout=NOTIFY_TIMEOUT,
            )

    async def _deregister(self, socket: str) -> None:
        for plugins in list(self._plugins.values()):
            for plugin in list(plugins):
                if plugin.socket == socket:
                    await self._drop(plugin)
                    self.events.deregistered.append(plugin.driver)
                    self._changed.set()

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
        stub = health_grpc.DRAResourceHealthStub(plugin.channel)  # type: ignore[no-untyped-call]
        while True:
            try:
                stream = stub.NodeWatchResources(health_pb.NodeWatchResourcesRequest())
                self.events.health_streams += 1
                async for response in stream:
                    self._health_report(plugin.driver, response)
            except grpc.RpcError as exc:
                log.info("WatchResources health stream of %s ended: %s", plugin.driver, exc)
            finally:
                self._health.pop(plugin.driver, None)  # clearDriver on stream exit
                self._changed.set()
            await asyncio.sleep(self._health_retry)

    def _health_report(self, driver: str, response: health_pb.NodeWatchResourcesResponse) -> None:
        cache = self._health.setdefault(driver, {})
        now = time.monotonic()
        names = {
            health_pb.HEALTHY: "Healthy",
            health_pb.UNHEALTHY: "Unhealthy",
        }
        for device in response.devices:
            key = (device.device.pool_name, device.device.device_name)
            message = device.message
            if len(message) > 1024:
                message = message[:1021] + "..."
            cache[key] = DeviceHealth(names.get(device.health, "Unknown"), message, now)
        self._changed.set()

    # -- prepare / unprepare -------------------------------------------------------

    def _plugin(self, driver: str) -> Plugin:
        plugins = self._plugins.get(driver)
        if not plugins:
            raise DraKubeletError(f"DRA driver {driver} is not registered")
        return plugins[-1]

    def _stub(self, plugin: Plugin) -> tuple[Any, Any]:
        if plugin.service == "v1.DRAPlugin":
            return dra_v1_pb2_grpc.DRAPluginStub(plugin.channel), dra_v1_pb2  # type: ignore[no-untyped-call]
        return dra_v1beta1_pb2_grpc.DRAPluginStub(plugin.channel), dra_v1beta1_pb2  # type: ignore[no-untyped-call]

    async def prepare(self, driver: str, claims: Sequence[ClaimRef]) -> None:
        """One pod sync: NodePrepareResources for the claims not prepared yet."""
        todo = [c for c in claims if c.uid not in self._prepared]
        if not todo:
            return
        plugin = self._plugin(driver)
        stub, pb = self._stub(plugin)
        self.events.prepare_calls += 1
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in todo]
        )
        try:
            response = await stub.NodePrepareResources(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            raise DraKubeletError(f"NodePrepareResources failed: {exc.details()}") from exc
        asked = {c.uid: c for c in todo}
        for uid, result in response.claims.items():
            claim = asked.get(uid)
            if claim is None:
                raise DraKubeletError(
                    f"NodePrepareResources returned result for unknown claim UID {uid}"
                )
            if result.error:
                raise DraKubeletError(
                    f"NodePrepareResources failed for claim {claim.namespace}/{claim.name}:"
                    f" {result.error}"
                )
            self._prepared[uid] = tuple(
                PreparedDevice(
                    tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids)
                )
                for d in result.devices
            )
        missing = len(todo) - len(response.claims)
        if missing:
            raise DraKubeletError(f"NodePrepareResources left out {missing} claims")

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
        stub, pb = self._stub(plugin)
        self.events.unprepare_calls += 1
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
        )
        try:
            response = await stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT)
        except grpc.RpcError as exc:
            raise DraKubeletError(f"NodeUnprepareResources failed: {exc.details()}") from exc
        for uid, result in response.claims.items():
            if result.error:
                raise DraKubeletError(
                    f"NodeUnprepareResources failed for claim {uid}: {result.error}"
                )
            self._prepared.pop(uid, None)
        missing = len(claims) - len(response.claims)
        if missing:
            raise DraKubeletError(f"NodeUnprepareResources skipped {missing} ResourceClaims")


def _channel(endpoint: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"unix:{endpoint}")


def _sockets(directory: Path) -> dict[str, tuple[int, int]]:
    """Unix sockets under ``directory`` (recursively), not starting with ``.``."""
    found: dict[str, tuple[int, int]] = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(info.st_mode):
                found[path] = (info.st_ino, info.st_ctime_ns)
    return found
