"""The daemon's supervisor against a real embedded kubelet, on short temp dirs.

``ScriptedDiscovery`` stands in for discovery where a test needs to control
units directly (or make a resource's discovery fail); tests of the real
discovery use ``tests.fakesys.FakeHost`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from genericdp.aio import Backoff
from genericdp.config import load_text
from genericdp.config.model import Config, ResourceDefinition
from genericdp.deviceplugin.backend import DevicePluginBackend
from genericdp.deviceplugin.holders import Holder, holders_by_device
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.discovery.model import DeviceNode, Roots, Unit
from genericdp.grpcservices import Stub
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.podresources import PodDevices
from genericdp.runtime.context import Discover
from genericdp.runtime.owed import Release
from genericdp.runtime.recorder import Recorder
from genericdp.runtime.supervisor import Supervisor
from genericdp.settings import Settings
from tests.kubelet_fakes import EmbeddedKubelet

# Settings that leave hotplug as the only way to a rescan.
NO_PERIODIC: Mapping[str, Any] = {"rescan_interval": 3600.0, "hotplug_settle": 0.05}


def unit(uid: str, *, numa: int | None = None, parent: str | None = None) -> Unit:
    """A unit of one node ``/dev/<uid>``."""
    node = DeviceNode(host_path=f"/dev/{uid}", container_path=f"/dev/{uid}", numa_node=numa)
    return Unit(id=uid, nodes=(node,), numa_node=numa, parent=parent)


@dataclass
class ScriptedDiscovery:
    """Units per resource name; a resource named in ``broken`` raises; calls are counted."""

    units: dict[str, Sequence[Unit]] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)
    calls: dict[str, int] = field(default_factory=dict)
    _loop: asyncio.AbstractEventLoop | None = None
    _called: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, definition: ResourceDefinition, roots: Roots) -> Sequence[Unit]:  # noqa: ARG002 -- the Discover signature
        # Runs in a worker thread (asyncio.to_thread): wake waiters on the loop.
        self.calls[definition.name] = self.calls.get(definition.name, 0) + 1
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake)
        if definition.name in self.broken:
            raise RuntimeError(f"scripted discovery failure for {definition.name}")
        return tuple(self.units.get(definition.name, ()))

    async def wait_calls(self, name: str, count: int, timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until discovery of ``name`` has run ``count`` times in all."""
        self._loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            while self.calls.get(name, 0) < count:
                called = self._called
                await called.wait()

    def _wake(self) -> None:
        old, self._called = self._called, asyncio.Event()
        old.set()


def config(text: str) -> Config:
    """A config from YAML text (``version: v1`` is added)."""
    return load_text("version: v1\n" + text, "test.yaml")


def settings_for(base: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "plugin_dir": base / "dp",
        "dev_root": base / "host" / "dev",
        "sys_root": base / "host" / "sys",
        "udev_root": base / "host" / "run" / "udev",
        "rescan_interval": 60.0,
        "node_name": "node-1",
        "cdi_dir": base / "cdi",
        "pod_resources_socket": base / "pod-resources" / "kubelet.sock",
        "state_dir": str(base / "state"),
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


class ListRecorder(UsageTracker):
    """A usage tracker that also keeps the last PodResources answer it was given."""

    def __init__(self) -> None:
        super().__init__()
        self._answer: dict[str, dict[str, set[Holder]]] = {}
        self.answers = 0  # PodResources answers taken

    def listed(self, resource: str) -> frozenset[str]:
        """IDs the last List answer showed held (what the poller has seen)."""
        return frozenset(d for d, h in self._answer.get(resource, {}).items() if h)

    def repeats(self, pods: Iterable[PodDevices]) -> bool:
        pods = tuple(pods)
        self.answers += 1
        self._answer = holders_by_device(pods)
        return super().repeats(pods)

    def observe(self, pods: Iterable[PodDevices]) -> tuple[Release, ...]:
        pods = tuple(pods)
        self._answer = holders_by_device(pods)
        return super().observe(pods)


def device_plugin(settings: Settings) -> DevicePluginBackend:
    """The device-plugin backend, its usage a ``ListRecorder``."""
    return DevicePluginBackend(settings, usage=ListRecorder())


def recorded(backend: DevicePluginBackend) -> ListRecorder:
    """The ``ListRecorder`` of a backend from ``device_plugin``."""
    assert isinstance(backend.usage, ListRecorder), "a backend of device_plugin()"
    return backend.usage


@dataclass
class Running:
    kubelet: EmbeddedKubelet
    supervisor: Supervisor
    settings: Settings
    backend: DevicePluginBackend

    @property
    def usage(self) -> ListRecorder:
        """Who holds what, as the device-plugin backend tracks it."""
        return recorded(self.backend)

    async def registered(self, names: Iterable[str], timeout: float = 5.0) -> None:  # noqa: ASYNC109
        """Wait until the kubelet has every named resource connected."""
        wanted = list(names)
        await self.kubelet.wait_until(
            lambda k: all(n in k.resources and k.resources[n].connected for n in wanted),
            timeout,
        )

    async def until(
        self,
        predicate: Callable[[EmbeddedKubelet], bool],
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> None:
        """Wait until ``predicate(kubelet)`` holds and every plugin the kubelet streams
        from has heard its Register answered, checked again at every change of the
        kubelet and of the daemon's statuses: the kubelet dials the plugin and reads its
        list before the Register call returns, so the daemon changes last, and a test
        reading ``supervisor.status()`` after this sees what the kubelet sees. Raises
        the kubelet's TimeoutError, describing its state."""

        def settled(kubelet: EmbeddedKubelet) -> bool:
            statuses = self.supervisor.status()
            streamed = (n for n, snap in kubelet.resources.items() if snap.connected)
            return predicate(kubelet) and all(
                statuses[n].registered for n in streamed if n in statuses
            )

        kubelet_side = asyncio.ensure_future(self.kubelet.wait_until(settled, timeout))
        daemon_side = asyncio.ensure_future(
            self.supervisor.wait_for(lambda _: settled(self.kubelet), timeout=timeout)
        )
        try:
            await asyncio.wait((kubelet_side, daemon_side), return_when=asyncio.FIRST_COMPLETED)
            if daemon_side.done() and daemon_side.exception() is None:
                return
            await kubelet_side
        finally:
            kubelet_side.cancel()
            daemon_side.cancel()

    def socket(self, name: str) -> Path:
        path = self.supervisor.status()[name].socket
        assert path is not None, f"{name} is not serving"
        return path


@asynccontextmanager
async def running(
    base: Path,
    cfg: Config,
    *,
    discover: Discover | None = None,
    metrics: Recorder | None = None,
    cleanup_backoff: Callable[[], Backoff] | None = None,
    pod_resources: bool = False,
    node_labels: Mapping[str, str] | None = None,
    **overrides: Any,
) -> AsyncIterator[Running]:
    """An embedded kubelet (serving PodResources if asked) and a started supervisor
    (real discovery unless ``discover``); both stopped at the end. ``overrides``
    are settings; ``node_labels`` the node's labels, as a static source (no API server)."""
    settings = settings_for(base, **overrides)
    socket = settings.pod_resources_socket if pod_resources else None
    async with EmbeddedKubelet(settings.plugin_dir, pod_resources_socket=socket) as kubelet:
        backend = device_plugin(settings)
        supervisor = Supervisor(
            settings,
            backend,
            discover=discover,
            metrics=metrics,
            cleanup_backoff=cleanup_backoff,
            node_labels=node_labels,
        )
        await supervisor.start(cfg)
        try:
            yield Running(kubelet, supervisor, settings, backend)
        finally:
            stragglers = await supervisor.stop()
            assert stragglers == (), f"tasks did not stop: {stragglers}"


@asynccontextmanager
async def plugin_stub(socket: Path) -> AsyncIterator[Stub]:
    """A client of one plugin socket, as the kubelet would dial it."""
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        yield Stub(channel, pb.DESCRIPTOR.services_by_name["DevicePlugin"])


def allocate_request(*ids: str) -> pb.AllocateRequest:
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
