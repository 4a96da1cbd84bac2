"""An in-process model of the kubelet's DRA side (1.34-1.37), as far as a driver can tell.

What ``simulate --backend dra`` and the tests run:

- Plugin watcher (pkg/kubelet/pluginmanager: plugin_watcher.go, operation_generator.go): the
  registry directory is walked at start, then watched with inotify; a unix socket not starting
  with ``.`` is dialed (10 s) and ``GetInfo`` called (1 s); a type without handler is refused
  through ``NotifyRegistrationStatus(false, ...)``; an empty ``endpoint`` means the
  registration socket. A failed or refused registration is tried again after 0.5 s, 1 s,
  2 s, ... while the socket stays (goroutinemap's backoff; seen on a 1.36 node). A removed
  socket deregisters; one created again at the same path replaces the old registration.
- DRA handler (pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go, dra_plugin.go):
  ``supported_versions`` must not be empty; the first one the kubelet supports is chosen
  (``v1.DRAPlugin``, ``v1beta1.DRAPlugin`` on 1.34+); none is an error, sent back with the
  kubelet's wording. An endpoint already registered for the driver is refused. Calls have a
  45 s deadline. Rolling updates (1.33+): every registration from another socket is kept,
  calls go to the newest, and when one goes away to the newest left.
- Prepare (pkg/kubelet/cm/dra/manager.go): only claims not prepared yet are sent, one call per
  driver; a claim's error, a result for a UID not asked, or claims left out fail the pod's
  preparation and the pod worker tries again later (the tests' ``prepare_pod`` retries with
  backoff). Unprepare: one call for the claims whose last pod is gone.

Each event is logged and wakes ``wait_until``; health streams and the event log are the tests'
subclass (tests/dra_kubelet.py). Known differences: pods are not real (``prepare`` stands for
admission, ``unprepare`` for the end of the claims' last pod); no ResourceSlice wiping, which
needs the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

import grpc
from inotify_simple import INotify, flags

from genericdp.aio import Changes, TaskSet, inotify_events, wait_event
from genericdp.dra.embedded.calls import (
    DraKubeletError,
    Plugin,
    PreparedDevice,
    node_prepare,
    node_unprepare,
)
from genericdp.grpcservices import Stub
from genericdp.kubeletplugin.api import pluginregistration_pb2 as reg_pb
from genericdp.kubeletplugin.claims import ClaimRef

log = logging.getLogger(__name__)

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # servicesSupportedByKubelet
DIAL_TIMEOUT = 10.0
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
CALL_TIMEOUT = 45.0
RETRY_FIRST = 0.5  # a failed registration is tried again after 0.5 s, 1 s, 2 s, ...
RETRY_CAP = 122.0  # goroutinemap's maximum (2 min 2 s)
# What the plugin watcher reacts to: a socket (or a directory) created,
# removed or moved in or out; fsnotify hands the kubelet the same.
WATCH = flags.CREATE | flags.DELETE | flags.MOVED_TO | flags.MOVED_FROM | flags.ONLYDIR


class EmbeddedDraKubelet:
    """Watches ``registry_dir``; registers DRA plugins; prepares and unprepares claims."""

    services: tuple[str, ...] = KUBELET_SERVICES

    def __init__(self, registry_dir: Path) -> None:
        self.registry_dir = registry_dir
        self._plugins: dict[str, list[Plugin]] = {}
        self._sockets: dict[str, tuple[int, int]] = {}  # socket path -> (inode, ctime)
        # socket path -> (attempts, next try on the loop's clock: the wait is real)
        self._retry: dict[str, tuple[int, float]] = {}
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
        """Watch the registry directory; raises DraKubeletError when it cannot be watched."""
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
        self._record("started", "", f"watching {self.registry_dir}")

    async def stop(self) -> None:
        await self._tasks.stop()
        await self._inotify.aclose()
        for plugin in [p for plugins in self._plugins.values() for p in plugins]:
            await self._drop(plugin)
        self._sockets.clear()
        self._record("stopped", "", "stopped")

    def registered(self, driver: str) -> bool:
        return bool(self._plugins.get(driver))

    def describe(self) -> str:
        """The state in words, for timeouts and logs."""
        plugins = [
            f"{p.driver} at {p.endpoint} ({p.service})"
            for plugins in self._plugins.values()
            for p in plugins
        ]
        return (
            f"plugins: {', '.join(plugins) or 'none'}\n"
            f"prepared claims: {', '.join(sorted(self._prepared)) or 'none'}"
        )

    async def wait_until(
        self,
        predicate: Callable[[Self], bool],
        timeout: float = 10.0,  # noqa: ASYNC109 -- the whole wait, re-armed on every change
    ) -> None:
        """Return once ``predicate(self)`` holds, checked at every event; else TimeoutError."""
        if not await self._changes.until(lambda: predicate(self), timeout):
            raise TimeoutError(
                f"embedded DRA kubelet: condition not met within {timeout}s\n{self.describe()}"
            )

    def _record(self, kind: str, driver: str, detail: str) -> None:
        log.info("embedded DRA kubelet: %s %s: %s", kind, driver or "-", detail)
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
            stub = Stub(channel, reg_pb.DESCRIPTOR.services_by_name["Registration"])
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
            calls = grpc.aio.insecure_channel(f"unix:{endpoint}")  # the plugin's own
            plugin = Plugin(info.name, endpoint, service, socket, calls)
            self._plugins.setdefault(info.name, []).append(plugin)
            self._added(plugin, list(info.supported_versions))
            await stub.NotifyRegistrationStatus(
                reg_pb.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT
            )
            self._record("registered", info.name, f"{service} at {endpoint}")
            return True

    def _added(self, plugin: Plugin, offered: Sequence[str]) -> None:
        """``plugin`` is registered (it has not been told yet); ``offered``: its versions."""

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
        self._record("refused", driver, message)  # once the plugin was told

    async def _deregister(self, socket: str) -> None:
        for plugins in list(self._plugins.values()):
            for plugin in list(plugins):
                if plugin.socket == socket:
                    await self._drop(plugin)
                    self._record("deregistered", plugin.driver, f"{socket} gone")

    async def _drop(self, plugin: Plugin) -> None:
        plugins = self._plugins.get(plugin.driver, [])
        if plugin in plugins:
            plugins.remove(plugin)
        if not plugins:
            self._plugins.pop(plugin.driver, None)
        await plugin.channel.close(None)

    # -- prepare / unprepare -------------------------------------------------------

    def _plugin(self, driver: str) -> Plugin:
        plugins = self._plugins.get(driver)
        if not plugins:
            raise DraKubeletError(f"DRA driver {driver} is not registered")
        return plugins[-1]

    async def prepare(self, driver: str, claims: Sequence[ClaimRef]) -> list[str]:
        """One pod sync: the pod's CDI IDs (only claims not prepared yet are sent)."""
        todo = [c for c in claims if c.uid not in self._prepared]
        if todo:
            plugin = self._plugin(driver)
            self._record("prepare", driver, ", ".join(c.uid for c in todo))
            self._prepared.update(await node_prepare(plugin, todo, CALL_TIMEOUT))
        return [i for c in claims for d in self._prepared[c.uid] for i in d.cdi_ids]

    async def unprepare(self, driver: str, claims: Sequence[ClaimRef]) -> None:
        """NodeUnprepareResources for the claims; they are forgotten once it succeeds."""
        plugin = self._plugin(driver)
        self._record("unprepare", driver, ", ".join(c.uid for c in claims))
        for uid in await node_unprepare(plugin, claims, CALL_TIMEOUT):
            self._prepared.pop(uid, None)


def sockets(directory: Path) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """What the plugin watcher sees: the unix sockets and subdirectories not named ``.*``."""
    found: dict[str, tuple[int, int]] = {}
    directories: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        directories.extend(os.path.join(root, d) for d in dirs)  # noqa: PTH118 -- os.walk gives strings
        for name in files:
            if name.startswith("."):
                continue
            path = os.path.join(root, name)  # noqa: PTH118 -- os.walk gives strings
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISSOCK(info.st_mode):
                found[path] = (info.st_ino, info.st_ctime_ns)
    return found, directories
