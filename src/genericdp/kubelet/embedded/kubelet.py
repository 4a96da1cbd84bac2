"""An in-process kubelet device manager, as far as a device plugin can tell.

Used by the integration tests and by ``genericdp simulate``. It follows
``pkg/kubelet/cm/devicemanager`` (manager.go, plugin/v1beta1/server.go,
handler.go, client.go, endpoint.go, pod_devices.go):

- On start it deletes every unix socket in the plugin directory (regular files
  such as ``kubelet_internal_checkpoint`` stay) and serves ``Registration`` on
  ``kubelet.sock``; optionally ``v1.PodResourcesLister`` on its own socket.
- Register checks the version (``v1beta1``) and the name (IsExtendedResourceName)
  and refuses with status UNKNOWN and the kubelet's message; then, before
  answering, dials the plugin's socket (10 s), keeps the options that
  GetDevicePluginOptions returns (not the request's) and reads ListAndWatch.
- Each ListAndWatch message replaces the device list; capacity counts every
  device, allocatable those whose health is exactly ``Healthy``. When a stream
  ends it is never reopened: every device turns unhealthy at once, and the
  resource is forgotten after ``endpoint_grace`` (5 minutes by default) unless
  the plugin registers again. After a restart known resources read capacity 0
  until their plugins register again.
- ``allocate`` admits one container: healthy, unallocated IDs; the plugin's
  GetPreferredAllocation only when it advertised it (valid preferred IDs first,
  then the rest); one Allocate with one container request and no deadline;
  PreStartContainer (30 s) when required. Errors read like the kubelet's
  ``UnexpectedAdmissionError``. A container that already holds devices gets the
  recorded answer again, without a new Allocate (the kubelet's checkpoint).

Known differences from the real kubelet:

- No Topology Manager: every device is in the "no affinity" set; ties are
  broken in the plugin's list order, not Go's random set order.
- A new registration of a resource closes the previous endpoint's stream. The
  real kubelet leaves the old connection to the plugin; when that old stream
  later ends it marks the resource unhealthy (1.26-1.31 even disconnect the new
  client). Plugins should stop the old server before registering again.
- Pods are not real: ``allocate`` stands for admission, ``release`` for pod
  deletion; PreStartContainer runs right after Allocate, not at container start.
- The checkpoint lives in memory: allocations survive ``restart`` but not a
  new instance, and no file is written.
- The kubelet's own socket is removed on ``stop`` (Go unlinks a listener's
  socket on close); a crashed kubelet would leave it behind.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

import grpc

from genericdp.errors import KubeletError
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.api import deviceplugin_pb2_grpc as pb_grpc
from genericdp.kubelet.api import podresources_pb2_grpc as pr_grpc
from genericdp.kubelet.embedded.admission import Admission
from genericdp.kubelet.embedded.endpoint import (
    DIAL_TIMEOUT,
    EndpointError,
    PluginEndpoint,
)
from genericdp.kubelet.embedded.names import is_extended_resource_name
from genericdp.kubelet.embedded.plugin_dir import prepare_socket, remove_socket, remove_sockets
from genericdp.kubelet.embedded.podresources_server import PodResourcesServicer
from genericdp.kubelet.embedded.registration_server import RegistrationServicer
from genericdp.kubelet.embedded.state import (
    DeviceSnapshot,
    Event,
    EventKind,
    ResourceSnapshot,
    ResourceState,
    describe,
)
from genericdp.kubelet.embedded.tasks import Tasks
from genericdp.kubelet.options import API_VERSION, KUBELET_SOCKET_NAME, unix_address
from genericdp.kubelet.podresources import PodDevices

log = logging.getLogger(__name__)

ENDPOINT_GRACE = 300.0  # endpointStopGracePeriod


class EmbeddedKubelet:
    """The kubelet's device manager on a directory of our choosing."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        pod_resources_socket: Path | None = None,
        node_name: str = "embedded",
        endpoint_grace: float = ENDPOINT_GRACE,
        dial_timeout: float = DIAL_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET_NAME
        self.pod_resources_socket = pod_resources_socket
        self.node_name = node_name
        self._grace = endpoint_grace
        self._dial_timeout = dial_timeout
        self._clock = clock
        self._states: dict[str, ResourceState] = {}
        self._endpoints: dict[str, PluginEndpoint] = {}
        self._events: list[Event] = []
        self._changed = asyncio.Event()
        self._admission = Admission(self._states, self._endpoints, self._record)
        self._tasks = Tasks()
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._servers: list[tuple[grpc.aio.Server, Path]] = []
        self._running = False

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Clean the plugin directory of sockets and serve, as a starting kubelet."""
        if self._running:
            raise KubeletError("embedded kubelet is already running")
        # Check both socket paths before touching anything.
        for path in (self.socket, self.pod_resources_socket):
            if path is not None:
                unix_address(path)
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        removed = remove_sockets(self.plugin_dir)
        registration = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(  # type: ignore[no-untyped-call]
            RegistrationServicer(self._register), registration
        )
        await self._serve(registration, self.socket)
        if self.pod_resources_socket is not None:
            lister = grpc.aio.server()
            pr_grpc.add_PodResourcesListerServicer_to_server(  # type: ignore[no-untyped-call]
                PodResourcesServicer(
                    lambda: tuple(self._admission.allocations.values()), lambda: self.resources
                ),
                lister,
            )
            await self._serve(lister, self.pod_resources_socket)
        self._running = True
        # Known resources read capacity 0 until their plugins register again.
        for state in self._states.values():
            state.replace_devices(())
            state.connected = False
            self._start_grace(state.name)
        names = ", ".join(p.name for p in removed) or "none"
        self._record(EventKind.STARTED, "", f"serving {self.socket}; removed sockets: {names}")

    async def stop(self) -> None:
        """Disconnect every plugin and stop serving; the state is kept for ``start``."""
        if not self._running:
            return
        self._running = False
        for name, endpoint in list(self._endpoints.items()):
            await endpoint.close()
            self._disconnected(name)
        self._endpoints.clear()
        for server, path in self._servers:
            await server.stop(None)
            remove_socket(path)
        self._servers.clear()
        await self._tasks.cancel_all()
        self._timers.clear()
        self._record(EventKind.STOPPED, "", "stopped")

    async def restart(self) -> None:
        """Stop and start again: sockets deleted, capacity 0 until plugins register."""
        await self.stop()
        await self.start()

    async def __aenter__(self) -> EmbeddedKubelet:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _serve(self, server: grpc.aio.Server, path: Path) -> None:
        address = unix_address(path)  # fails clearly on a path too long for a socket
        prepare_socket(path)
        try:
            server.add_insecure_port(address)
        except RuntimeError as exc:
            raise KubeletError(f"cannot listen on {path}: {exc}") from exc
        await server.start()
        self._servers.append((server, path))

    # -- introspection ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the kubelet is serving."""
        return self._running

    @property
    def resources(self) -> Mapping[str, ResourceSnapshot]:
        """Every known resource, as frozen snapshots."""
        return {
            name: state.snapshot(self._admission.allocated(name))
            for name, state in self._states.items()
        }

    @property
    def events(self) -> tuple[Event, ...]:
        """The event log, oldest first."""
        return tuple(self._events)

    def pod_devices(self) -> tuple[PodDevices, ...]:
        """Current allocations, in the shape the PodResources client returns."""
        return tuple(
            PodDevices(a.namespace, a.pod, a.container, a.resource, a.device_ids)
            for a in self._admission.allocations.values()
        )

    def describe(self) -> str:
        """The state in words, for timeouts and logs."""
        return describe(self.resources, self._events)

    async def wait_until(
        self,
        predicate: Callable[[EmbeddedKubelet], bool],
        timeout: float = 5.0,  # noqa: ASYNC109 -- the whole wait, re-armed on every change
    ) -> None:
        """Return once ``predicate(self)`` holds, re-checking on every state change.

        Raises TimeoutError describing the current state when it does not hold in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(
                    f"embedded kubelet: condition not met within {timeout}s\n{self.describe()}"
                )
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                continue

    def _record(self, kind: EventKind, resource: str, detail: str) -> None:
        event = Event(kind=kind, resource=resource, detail=detail, at=self._clock())
        self._events.append(event)
        log.info("embedded kubelet: %s", event)
        # Wake every waiter, then arm a fresh event for the next change.
        self._changed.set()
        self._changed = asyncio.Event()

    # -- registration and streams ----------------------------------------------------

    async def _register(self, request: pb.RegisterRequest) -> str | None:
        name = request.resource_name
        if request.version != API_VERSION:
            return self._reject(
                name,
                f"requested API version {_go_quote(request.version)} is not supported by "
                f'kubelet. Supported version is ["{API_VERSION}"]',
            )
        if not is_extended_resource_name(name):
            return self._reject(name, f"the ResourceName {_go_quote(name)} is invalid")
        endpoint = PluginEndpoint(name, request.endpoint, self.plugin_dir / request.endpoint)
        try:
            options = await endpoint.connect(self._dial_timeout)
        except EndpointError as exc:
            return self._reject(name, str(exc))
        if not self._running:
            await endpoint.close()
            return self._reject(name, "kubelet is shutting down")
        old = self._endpoints.get(name)
        self._endpoints[name] = endpoint
        state = self._states.setdefault(name, ResourceState(name))
        state.endpoint = request.endpoint
        state.options = options
        state.connected = True
        state.registrations += 1
        self._cancel_grace(name)
        endpoint.watch(self._tasks, self._on_list, self._on_end)
        replacing = f", replacing {old.endpoint}" if old is not None else ""
        self._record(
            EventKind.REGISTERED, name, f"endpoint {request.endpoint}, {options}{replacing}"
        )
        if old is not None:
            await old.close()
        return None

    def _reject(self, name: str, message: str) -> str:
        self._record(EventKind.REJECTED, name, message)
        return message

    def _current(self, endpoint: PluginEndpoint) -> ResourceState | None:
        if endpoint.closed or self._endpoints.get(endpoint.resource) is not endpoint:
            return None
        return self._states.get(endpoint.resource)

    def _on_list(self, endpoint: PluginEndpoint, response: pb.ListAndWatchResponse) -> None:
        state = self._current(endpoint)
        if state is None:
            return
        state.replace_devices(
            DeviceSnapshot(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
            for d in response.devices
        )
        healthy = len(state.healthy_ids())
        self._record(
            EventKind.DEVICES, state.name, f"{len(state.devices)} devices, {healthy} healthy"
        )

    def _on_end(self, endpoint: PluginEndpoint, reason: str) -> None:
        if self._current(endpoint) is None:
            return
        del self._endpoints[endpoint.resource]
        self._disconnected(endpoint.resource)
        self._start_grace(endpoint.resource)
        self._record(EventKind.STREAM_ENDED, endpoint.resource, f"ListAndWatch ended: {reason}")

    def _disconnected(self, name: str) -> None:
        state = self._states.get(name)
        if state is not None:
            state.mark_unhealthy()
            state.connected = False

    def _start_grace(self, name: str) -> None:
        self._cancel_grace(name)
        self._timers[name] = self._tasks.spawn(self._expire(name), name=f"grace {name}")

    def _cancel_grace(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    async def _expire(self, name: str) -> None:
        await asyncio.sleep(self._grace)
        self._timers.pop(name, None)
        state = self._states.get(name)
        if state is not None and not state.connected:
            del self._states[name]
            self._record(EventKind.EXPIRED, name, f"forgotten after {self._grace}s")

    # -- pods ------------------------------------------------------------------------

    async def allocate(
        self,
        resource: str,
        count: int,
        *,
        pod: str,
        container: str = "main",
        namespace: str = "default",
    ) -> pb.AllocateResponse:
        """Admit one container asking for ``count`` devices; return the plugin's answer.

        Raises AllocationError as the kubelet would fail the pod (see the module doc).
        """
        return await self._admission.allocate(
            resource, count, pod=pod, container=container, namespace=namespace
        )

    def release(self, namespace: str, pod: str) -> int:
        """Forget a deleted pod's allocations; return how many devices were freed."""
        return self._admission.release(namespace, pod)


def _go_quote(value: str) -> str:
    """Go's %q for the plain strings plugins send (JSON escaping is close enough)."""
    return json.dumps(value, ensure_ascii=False)
