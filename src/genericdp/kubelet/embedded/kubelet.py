"""An in-process kubelet device manager, as far as a device plugin can tell.

For the integration tests and ``genericdp simulate``; it follows
``pkg/kubelet/cm/devicemanager`` (manager.go, plugin/v1beta1/{server,handler,client}.go,
endpoint.go, pod_devices.go):

- ``start`` deletes every unix socket in the plugin directory (regular files such as
  ``kubelet_internal_checkpoint`` stay), its own stale one too, then serves
  ``Registration`` on ``kubelet.sock`` (and ``v1.PodResourcesLister`` if asked).
  Known resources read capacity 0 until their plugins register again.
- Register checks the version (``v1beta1``) and the name (IsExtendedResourceName),
  refusing with status UNKNOWN and the kubelet's message. Before answering it files a
  client under the resource name (replacing any), dials the plugin (10 s, retrying a
  missing or refusing socket), keeps the options GetDevicePluginOptions returns (not
  the request's) and reads ListAndWatch. The dial-back runs under the Register call's
  context: a plugin that gives up on its Register first fails it ("context canceled",
  seen on a real 1.36 node, docs/contributing/testing.md).
- Clients are kept **by resource name**, as in 1.26-1.32, the versions plugins must
  still survive (later ``handler.go`` keeps a list per name and deregisters by socket
  path). A failed dial-back deletes the client under its name, even a newer, live one
  (event ``deregistered``). A stream that ends disconnects whatever client has its
  name (an old stream can disconnect a newer client) and marks the resource
  unhealthy; with no client under the name it ends unnoticed (``stream-unnoticed``):
  its devices stay allocatable, and Allocate goes to a connection whose socket may be
  gone. A new registration leaves the previous endpoint's stream open.
  ``problems()`` lists such stale or duplicate state.
- Each ListAndWatch message replaces the device list; capacity counts every device,
  allocatable those whose health is exactly ``Healthy``. A stream is never reopened:
  when it ends every device turns unhealthy, and the resource is forgotten after
  ``endpoint_grace`` (5 minutes) unless the plugin registers again.
- ``allocate`` admits one container (admission.py); a container's
  ``allocatedResourcesStatus`` (KEP-4680) is tests/kubelet_fakes.py's subclass.

Where it differs from the real kubelet:

- ``crash`` stands for a killed kubelet: connections drop, Register calls in flight
  fail (gRPC ``UNAVAILABLE`` "Cancelling all calls", not a reset connection) and a
  dead ``kubelet.sock`` stays. It keeps its resources and allocations in memory where
  the real one rebuilds them from its checkpoint file: they survive ``restart`` but
  not a new instance. ``stop`` removes the socket, as Go unlinks a listener's on close.
- Concurrent Register calls race in asyncio's order, not grpc-go's goroutines'.
- Pods are not real: ``allocate`` stands for admission, ``release`` for pod deletion;
  PreStartContainer runs right after Allocate, not at container start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Self

from genericdp import logsetup
from genericdp.aio import Changes, TaskSet
from genericdp.errors import KubeletError
from genericdp.grpcservices import service_handler
from genericdp.k8snames import is_extended_resource_name
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.api import podresources_pb2 as pr
from genericdp.kubelet.embedded.admission import Admission
from genericdp.kubelet.embedded.endpoint import EndpointError, PluginEndpoint
from genericdp.kubelet.embedded.plugin_dir import leave_dead_socket, remove_sockets
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
from genericdp.kubelet.options import API_VERSION, KUBELET_DIAL_TIMEOUT, KUBELET_SOCKET_NAME
from genericdp.kubelet.podresources import PodDevices
from genericdp.unixgrpc import UnixServer, serve, unix_address

if TYPE_CHECKING:
    from google.protobuf.descriptor import ServiceDescriptor

log = logging.getLogger(__name__)

ENDPOINT_GRACE = 300.0  # endpointStopGracePeriod


class EmbeddedKubelet:
    """The kubelet's device manager on a directory of our choosing."""

    def __init__(
        self,
        plugin_dir: Path,
        *,
        pod_resources_socket: Path | None = None,
        endpoint_grace: float = ENDPOINT_GRACE,
        dial_timeout: float = KUBELET_DIAL_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plugin_dir = plugin_dir
        self.socket = plugin_dir / KUBELET_SOCKET_NAME
        self.pod_resources_socket = pod_resources_socket
        self._grace = endpoint_grace
        self._dial_timeout = dial_timeout
        self._clock = clock
        self._states: dict[str, ResourceState] = {}
        # By name, as 1.26-1.32: the manager's endpoints (for Allocate), the server's clients.
        self._endpoints: dict[str, PluginEndpoint] = {}
        self._clients: dict[str, PluginEndpoint] = {}
        self._connections: set[PluginEndpoint] = set()  # every connection not closed yet
        self._incarnation = 0  # bumped at each start: work of a dead kubelet is void
        self._events: list[Event] = []
        self._changes = Changes()
        self._admission = Admission(self._states, self._endpoints, self._record)
        self.allocate = self._admission.allocate
        self.release = self._admission.release
        self._tasks = TaskSet(log)
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._servers: list[UnixServer] = []
        self._running = False

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Clean the plugin directory of sockets and serve, as a starting kubelet."""
        if self._running:
            raise KubeletError("embedded kubelet is already running")
        for path in (self.socket, self.pod_resources_socket):
            if path is not None:
                unix_address(path)  # both checked before anything is touched
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._incarnation += 1
        removed = remove_sockets(self.plugin_dir)
        registration = RegistrationServicer(self._register)
        await self._serve(self.socket, pb.DESCRIPTOR.services_by_name["Registration"], registration)
        if self.pod_resources_socket is not None:
            lister = PodResourcesServicer(lambda: tuple(self._admission.allocations.values()))
            service = pr.DESCRIPTOR.services_by_name["PodResourcesLister"]
            await self._serve(self.pod_resources_socket, service, lister)
        self._running = True
        for state in self._states.values():
            state.devices = {}
            state.connected = False
            self._start_grace(state.name)
        names = ", ".join(p.name for p in removed) or "none"
        self._record(EventKind.STARTED, "", f"serving {self.socket}; removed sockets: {names}")

    async def stop(self) -> None:
        """Disconnect every plugin and stop serving; the state is kept for ``start``."""
        await self._halt(crashed=False)

    async def crash(self) -> None:
        """Die as a killed kubelet (see the module docstring)."""
        await self._halt(crashed=True)

    async def restart(self, *, crash: bool = False) -> None:
        await self._halt(crashed=crash)
        await self.start()

    async def _halt(self, *, crashed: bool) -> None:
        if not self._running:
            return
        self._running = False
        self._incarnation += 1  # Register handlers still running must not touch the state
        for connection in list(self._connections):
            await self._close(connection)
        for name in list(self._endpoints):
            self._disconnected(name)
        self._endpoints.clear()
        self._clients.clear()
        for server in self._servers:
            await server.stop(None)  # cancels Register calls in flight, unlinks the socket
            if crashed:
                leave_dead_socket(server.socket)
        self._servers.clear()
        await self._tasks.stop(timeout=None)
        self._timers.clear()
        if crashed:
            self._record(EventKind.CRASHED, "", f"crashed; {self.socket} left behind")
        else:
            self._record(EventKind.STOPPED, "", "stopped")

    async def _close(self, endpoint: PluginEndpoint) -> None:
        self._connections.discard(endpoint)
        await endpoint.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, path: Path, service: ServiceDescriptor, servicer: object) -> None:
        handler = service_handler(service, servicer)
        # The kubelet's servers keep gRPC's default message limits, not a plugin's.
        server = await serve(path, [handler], what=service.name, make_dir=True, options=())
        self._servers.append(server)

    # -- introspection ---------------------------------------------------------------

    @property
    def resources(self) -> Mapping[str, ResourceSnapshot]:
        """Every known resource, as frozen snapshots."""
        return {
            name: state.snapshot(self._admission.allocated(name), self._open_streams(name))
            for name, state in self._states.items()
        }

    def _open_streams(self, name: str) -> int:
        return sum(c.streaming for c in self._connections if c.resource == name)

    def problems(self) -> list[str]:
        """Stale or duplicate registrations, in words: a connected resource must have
        one open ListAndWatch, from the endpoint Allocate uses, filed as its client, on a
        socket that exists; and every failed dial-back that removed another's client."""
        found = [
            f"{e.resource}: {e.detail}" for e in self._events if e.kind is EventKind.DEREGISTERED
        ]
        for name, state in self._states.items():
            streams = self._open_streams(name)
            if streams > 1:
                found.append(f"{name}: {streams} ListAndWatch streams open")
            if not state.connected:
                continue
            endpoint = self._endpoints.get(name)
            if endpoint is None or not endpoint.streaming:
                found.append(f"{name}: counted as connected but its stream is gone")
                continue
            if self._clients.get(name) is not endpoint:
                found.append(f"{name}: the end of {endpoint.endpoint}'s stream would go unnoticed")
            if not endpoint.socket.is_socket():
                found.append(f"{name}: {endpoint.socket} is not a socket any more")
        return found

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
        predicate: Callable[[Self], bool],
        timeout: float = 5.0,  # noqa: ASYNC109 -- the whole wait, re-armed on every change
    ) -> None:
        """Return once ``predicate(self)`` holds; TimeoutError describing the state if not."""
        if not await self._changes.until(lambda: predicate(self), timeout):
            raise TimeoutError(
                f"embedded kubelet: condition not met within {timeout}s\n{self.describe()}"
            )

    def _record(self, kind: EventKind, resource: str, detail: str) -> None:
        event = Event(kind=kind, resource=resource, detail=detail, at=self._clock())
        self._events.append(event)
        about = {"resource": resource} if resource else {}
        with logsetup.fields(**about):
            log.info("embedded kubelet: %s", event)
        self._changes.notify()

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
        if not self._running:  # arrived while this kubelet was going down
            return self._reject(name, "kubelet is shutting down")
        incarnation = self._incarnation
        endpoint = PluginEndpoint(name, request.endpoint, self.plugin_dir / request.endpoint)
        self._clients[name] = endpoint  # registerClient: by name, replacing any other
        self._record(EventKind.DIALING, name, f"dialing {request.endpoint}")
        try:
            options = await endpoint.connect(self._dial_timeout)
        except EndpointError as exc:
            if incarnation == self._incarnation:
                self._deregister(name, endpoint)
            return self._reject(name, str(exc))
        except asyncio.CancelledError:  # the plugin gave up on its Register
            if incarnation == self._incarnation and self._running:
                self._deregister(name, endpoint)
                self._record(
                    EventKind.REJECTED, name, "failed to dial device plugin: context canceled"
                )
            await endpoint.close()
            raise
        if incarnation != self._incarnation or not self._running:  # this kubelet died meanwhile
            await endpoint.close()
            return self._reject(name, "kubelet is shutting down")
        # PluginConnected: Allocate uses this endpoint from now on.
        old = self._endpoints.get(name)
        self._endpoints[name] = endpoint
        self._connections.add(endpoint)
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
        return None

    def _deregister(self, name: str, failed: PluginEndpoint) -> None:
        """deregisterClient(name) after a failed dial-back: whatever client has the name goes."""
        current = self._clients.pop(name, None)
        if current is not None and current is not failed:
            self._record(
                EventKind.DEREGISTERED,
                name,
                f"dial-back of {failed.endpoint} failed; removed the client of "
                f"{current.endpoint} registered meanwhile",
            )

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
        state.devices = {  # each message is the whole list, never a delta
            d.ID: DeviceSnapshot(d.ID, d.health, tuple(n.ID for n in d.topology.nodes))
            for d in response.devices
        }
        healthy = len(state.healthy_ids())
        self._record(
            EventKind.DEVICES, state.name, f"{len(state.devices)} devices, {healthy} healthy"
        )

    async def _on_end(self, endpoint: PluginEndpoint, reason: str) -> None:
        """runClient after Run returns: disconnect the client filed under the name."""
        if endpoint.closed:
            return  # closed by the kubelet itself (stop, or a Disconnect)
        name = endpoint.resource
        client = self._clients.pop(name, None)
        if client is None:
            self._record(
                EventKind.STREAM_UNNOTICED,
                name,
                f"ListAndWatch of {endpoint.endpoint} ended ({reason}); no client is "
                "registered under the name, so nothing is disconnected",
            )
            return
        await self._close(client)  # may be a newer client than the stream that ended
        self._disconnected(name)
        self._start_grace(name)
        which = "" if client is endpoint else f"; disconnected the newer {client.endpoint}"
        ended = f"ListAndWatch of {endpoint.endpoint} ended: {reason}{which}"
        self._record(EventKind.STREAM_ENDED, name, ended)

    def _disconnected(self, name: str) -> None:
        """PluginDisconnected: every device unhealthy, the grace period starts."""
        state = self._states.get(name)
        if state is not None and name in self._endpoints:
            state.mark_unhealthy()
            state.connected = False

    def _start_grace(self, name: str) -> None:
        self._cancel_grace(name)
        self._timers[name] = self._tasks.run(f"grace {name}", self._expire(name))

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
            self._endpoints.pop(name, None)
            self._record(EventKind.EXPIRED, name, f"forgotten after {self._grace}s")


def _go_quote(value: str) -> str:
    """Go's %q for the plain strings plugins send (JSON escaping is close enough)."""
    return json.dumps(value, ensure_ascii=False)
