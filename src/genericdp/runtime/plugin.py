"""One resource's device plugin: its socket and server, Register, the streams.

The kubelet dials the plugin back while it handles Register, so the server is
serving before Register is sent. Registration runs in its own loop, woken by
``request_registration``: at start, when the kubelet restarts (our socket gone
or ``kubelet.sock`` created, seen by the kubelet watch) and when the kubelet
ends our ListAndWatch stream (it never reopens one). Requests arriving close
together are merged, and a failed attempt is retried with backoff, or at once
when a new request comes (a new ``kubelet.sock`` is worth trying right away).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import secrets
import socket as socketlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from genericdp.config.model import Exec, ResourceDefinition
from genericdp.confine import clip
from genericdp.discovery.model import DeviceInfo, Unit
from genericdp.errors import (
    InvalidDevicesError,
    KubeletError,
    RegistrationError,
    UnsafeAllocationError,
)
from genericdp.hooks import INIT, PRE_START
from genericdp.kubelet.options import KUBELET_SOCKET_NAME, MAX_UNIX_PATH_BYTES, PluginOptions
from genericdp.kubelet.registration import register
from genericdp.kubelet.servicer import (
    MAX_MESSAGE_BYTES,
    PluginServer,
    PreferredRequest,
    allocate_response_size,
)
from genericdp.metrics import NO_METRICS, Recorder, allocation_result
from genericdp.render import Allocation, render_allocation
from genericdp.runtime.preferred import preferred_allocation
from genericdp.runtime.reconcile import plugin_options
from genericdp.runtime.state import DeviceState
from genericdp.runtime.tasks import Backoff, wait_event

log = logging.getLogger(__name__)

SOCKET_PREFIX = "gdp-"
_MAX_SLUG = 40
_MAX_IDS_SHOWN = 5
_MAX_ID_CHARS = 80  # our IDs are at most 63


class HookRunner(Protocol):
    """``genericdp.hooks.run_hook``, or a stand-in with its signature."""

    async def __call__(
        self,
        name: str,
        spec: Exec,
        *,
        resource: str,
        units: Sequence[Unit],
        device_ids: Sequence[str] = (),
        node_name: str = "",
        logger: logging.Logger | None = None,
    ) -> object: ...


@dataclass(frozen=True)
class PluginStatus:
    """What an observer (``simulate``, tests, metrics) can see of one plugin."""

    resource: str
    socket: Path | None
    registered: bool
    registrations: int  # successful Register calls since start
    streams: int  # ListAndWatch streams open now
    devices: int
    healthy: int
    last_error: str | None = None
    units: int = 0  # discovered units (``devices`` counts their replica IDs)


def socket_name(resource: str, token: str | None = None, *, max_bytes: int | None = None) -> str:
    """``gdp-<slug>-<token>.sock``: unique per start, recognisably ours.

    ``max_bytes`` caps the whole name (the socket path must fit the kernel's
    107 bytes): the slug is cut and a hash of the resource name keeps it
    unique. Raises KubeletError when not even ``gdp-<hash>-<token>.sock`` fits.
    """
    token = token or secrets.token_hex(4)
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", resource).strip("-.") or "resource"
    digest = hashlib.sha256(resource.encode()).hexdigest()[:8]
    room = _MAX_SLUG if max_bytes is None else min(_MAX_SLUG, max_bytes - _fixed_bytes(token))
    if room < len(digest):
        raise KubeletError(
            f"a socket name for {resource} needs {_fixed_bytes(token) + len(digest)} bytes"
            f" but only {max_bytes} are left"
        )
    if len(slug) > room:
        keep = room - len(digest) - 1
        slug = f"{slug[:keep].rstrip('-.')}-{digest}" if keep > 0 else digest
    return f"{SOCKET_PREFIX}{slug}-{token}.sock"


def _fixed_bytes(token: str) -> int:
    return len(f"{SOCKET_PREFIX}-{token}.sock")


def socket_path(plugin_dir: Path, resource: str, token: str | None = None) -> tuple[Path, bool]:
    """Where to serve ``resource`` in ``plugin_dir``, and whether the name was shortened.

    The kubelet's directory follows its root directory, and a unix socket path
    is at most 107 bytes: a long directory leaves less room for the name, so
    the name gives way (a hash keeps it unique). Raises KubeletError naming the
    directory when even the shortest name does not fit.
    """
    directory = plugin_dir.absolute()
    left = MAX_UNIX_PATH_BYTES - len(str(directory).encode()) - 1
    usual = socket_name(resource, token)
    if len(usual.encode()) <= left:
        return directory / usual, False
    try:
        name = socket_name(resource, usual.rsplit("-", 1)[1].removesuffix(".sock"), max_bytes=left)
    except KubeletError:
        raise KubeletError(
            f"the device-plugin directory {directory} is too long for a unix socket in it"
            f" (paths are limited to {MAX_UNIX_PATH_BYTES} bytes): use a shorter --plugin-dir"
        ) from None
    return directory / name, True


def remove_stale_sockets(plugin_dir: Path) -> list[Path]:
    """Remove our sockets that nothing listens on (left by a killed predecessor).

    A socket that accepts a connection belongs to a live process (say, the old
    pod of a rolling update) and stays.
    """
    removed: list[Path] = []
    for path in sorted(plugin_dir.glob(f"{SOCKET_PREFIX}*.sock")):
        with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect(str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)
                removed.append(path)
            except OSError as exc:
                log.warning("cannot check socket %s, leaving it: %s", path, exc)
    return removed


def _shown(ids: Sequence[str]) -> str:
    """A few IDs for a message; each is cut short (the peer chose them, maybe 1 MB long)."""
    more = len(ids) - _MAX_IDS_SHOWN
    listed = ", ".join(clip(i, _MAX_ID_CHARS) for i in ids[:_MAX_IDS_SHOWN])
    return listed + (f" and {more} more" if more > 0 else "")


class ResourcePlugin:
    """The DevicePlugin backend and kubelet registration for one resource."""

    def __init__(
        self,
        definition: ResourceDefinition,
        state: DeviceState,
        *,
        plugin_dir: Path,
        run_hook: HookRunner,
        node_name: str = "",
        on_status: Callable[[], None] = lambda: None,
        backoff: Backoff | None = None,
        settle: float = 0.05,
        register_timeout: float = 5.0,
        metrics: Recorder = NO_METRICS,
        on_claim: Callable[[Sequence[tuple[str, ...]]], Awaitable[None]] | None = None,
        on_allocated: Callable[[tuple[str, ...]], None] = lambda ids: None,
    ) -> None:
        self._definition = definition
        self._metrics = metrics
        self.state = state
        self._plugin_dir = plugin_dir
        self._run_hook = run_hook
        self._node_name = node_name
        self._on_status = on_status
        self._backoff = backoff or Backoff()
        self._settle = settle
        self._register_timeout = register_timeout
        # Release tracking (runtime/release.py): the kubelet handing IDs out
        # again means their last holder is done; what we hand out is in use.
        self._on_claim = on_claim
        self._on_allocated = on_allocated
        self._server: PluginServer | None = None
        self._wanted = asyncio.Event()
        self._reasons: list[str] = []
        self._generation = 0  # bumped at each Register attempt
        self._registered = False
        self._registrations = 0
        self._streams = 0
        self._last_error: str | None = None
        self._closing = False
        self._want_new_socket = False

    # -- what the supervisor uses ------------------------------------------------

    @property
    def definition(self) -> ResourceDefinition:
        return self._definition

    def update(self, definition: ResourceDefinition) -> None:
        """Swap the definition in place; the device list follows the new count."""
        self._definition = definition
        self.state.set_count(definition.count)

    @property
    def socket(self) -> Path | None:
        return self._server.socket if self._server is not None else None

    def status(self) -> PluginStatus:
        devices, healthy = self.state.counts()
        return PluginStatus(
            resource=self.resource,
            socket=self.socket,
            registered=self._registered,
            registrations=self._registrations,
            streams=self._streams,
            devices=devices,
            healthy=healthy,
            last_error=self._last_error,
            units=len(self.state.units),
        )

    def request_registration(self, reason: str, *, new_socket: bool = False) -> None:
        """Ask the registration loop to Register (again); cheap, merges with others."""
        if new_socket:
            self._want_new_socket = True
        self._reasons.append(reason)
        self._wanted.set()

    async def run_registration(self) -> None:
        """Serve and Register whenever asked, until cancelled (``close`` stops serving)."""
        while True:
            await self._wanted.wait()
            await asyncio.sleep(self._settle)  # merge a burst (one kubelet restart)
            self._wanted.clear()
            reasons, self._reasons = ", ".join(dict.fromkeys(self._reasons)), []
            try:
                await self._register_until_done(reasons)
            except Exception:
                # A bug of ours: the task guard logs it and runs us again, which
                # must then still register.
                self.request_registration("retry after an error")
                raise

    async def close(self, grace: float = 3.0) -> None:
        """End the streams, stop the server and remove its socket."""
        self._closing = True
        self.state.close()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
            log.info("%s: stopped serving on %s", self.resource, server.socket)
        self._registered = False
        self._on_status()

    # -- registration ------------------------------------------------------------

    async def _register_until_done(self, reasons: str) -> None:
        self._backoff.reset()
        while not await self._attempt(reasons):
            delay = self._backoff.next()
            await wait_event(self._wanted, delay)
            if self._wanted.is_set():  # asked again (a new kubelet.sock?): try now
                await asyncio.sleep(self._settle)
                self._wanted.clear()
                self._backoff.reset()
                reasons = ", ".join(dict.fromkeys(self._reasons)) or reasons
                self._reasons = []

    async def _attempt(self, reasons: str) -> bool:
        # Bump first: streams of an older generation that end from here on
        # (the kubelet replacing them, our own server restart) are not news.
        self._generation += 1
        self._registered = False
        try:
            await self._ensure_serving()
        except KubeletError as exc:
            return self._failed(str(exc))
        kubelet = self._plugin_dir / KUBELET_SOCKET_NAME
        if not kubelet.exists():
            return self._failed(f"waiting for the kubelet: {kubelet} does not exist")
        assert self._server is not None
        endpoint = self._server.socket.name
        try:
            await register(
                kubelet,
                endpoint=endpoint,
                resource_name=self.resource,
                options=self.options(),
                timeout=self._register_timeout,
            )
        except RegistrationError as exc:
            return self._failed(str(exc))
        self._registered = True
        self._registrations += 1
        self._metrics.registration(self.resource, ok=True)
        self._last_error = None
        log.info(
            "%s: registered with the kubelet, endpoint %s (%s)", self.resource, endpoint, reasons
        )
        self._on_status()
        return True

    def _failed(self, message: str) -> bool:
        if message != self._last_error:
            log.warning("%s: not registered: %s", self.resource, message)
        self._last_error = message
        self._metrics.registration(self.resource, ok=False)
        self._on_status()
        return False

    async def _ensure_serving(self) -> None:
        """Serve on a fresh socket unless the current one is still in place.

        The kubelet deletes every socket in its directory when it starts, and
        an options change needs a fresh endpoint too.
        """
        server = self._server
        if server is not None and server.socket.exists() and not self._want_new_socket:
            return
        self._want_new_socket = False
        if server is not None:
            self._server = None
            await server.stop(0.5)
        path, shortened = socket_path(self._plugin_dir, self.resource)
        self._server = await PluginServer.start(self, path)
        note = f" (name shortened to fit {MAX_UNIX_PATH_BYTES} bytes)" if shortened else ""
        log.info("%s: serving on %s%s", self.resource, path, note)

    # -- the Backend the gRPC servicer calls --------------------------------------

    @property
    def resource(self) -> str:
        return self._definition.name

    def options(self) -> PluginOptions:
        return plugin_options(self._definition)

    def devices(self) -> tuple[int, Sequence[DeviceInfo]]:
        return self.state.version, self.state.device_list()

    async def wait_devices(self, version: int) -> int | None:
        return await self.state.wait_changed(version)

    def stream_opened(self) -> int:
        self._streams += 1
        self._on_status()
        return self._generation

    def stream_closed(self, token: int, *, by_peer: bool) -> None:
        self._streams -= 1
        self._on_status()
        if by_peer and not self._closing and token == self._generation:
            self._registered = False
            log.warning("%s: the kubelet ended ListAndWatch", self.resource)
            self.request_registration("kubelet ended ListAndWatch")

    def preferred(self, requests: Sequence[PreferredRequest]) -> list[tuple[str, ...]]:
        units = self.state.units_view()
        policy = self._definition.preferred_allocation
        return [
            preferred_allocation(
                policy,
                available=r.available,
                must_include=r.must_include,
                size=r.size,
                units=units,
            )
            for r in requests
        ]

    async def allocate(self, requests: Sequence[tuple[str, ...]]) -> list[Allocation]:
        """Check every container's IDs first, then run init hooks and render."""
        started = time.monotonic()
        error: BaseException | None = None
        try:
            return await self._allocate(requests)
        except BaseException as exc:
            error = exc
            raise
        finally:
            elapsed = time.monotonic() - started
            self._metrics.allocation(self.resource, allocation_result(error), elapsed)

    async def _allocate(self, requests: Sequence[tuple[str, ...]]) -> list[Allocation]:
        # Everything that can refuse the request without side effects comes
        # first: a refused Allocate (unknown IDs, a path escaping its template,
        # an answer over 4 MiB) must not run cleanup on a unit a live pod holds,
        # nor make us forget that pod's hold (release.UsageTracker.claim).
        definition = self._definition
        lookups = [self._checked(ids) for ids in requests]
        allocations = [
            render_allocation(definition, units, node_name=self._node_name, device_ids=ids)
            for ids, units in zip(requests, lookups, strict=True)
        ]
        size = allocate_response_size(allocations)
        if size > MAX_MESSAGE_BYTES:
            raise UnsafeAllocationError(
                f"the Allocate answer for {sum(len(ids) for ids in requests)} device(s) would be"
                f" {size} bytes, over the kubelet's {MAX_MESSAGE_BYTES}-byte message limit:"
                " make the allocate templates render less"
            )
        if self._on_claim is not None:
            await self._on_claim(requests)  # a cleanup the kubelet did not wait for
            lookups = [self._checked(ids) for ids in requests]  # ... which may have failed
        for ids, units in zip(requests, lookups, strict=True):
            if definition.hooks.init is not None:
                await self._run_hook(
                    INIT,
                    definition.hooks.init,
                    resource=definition.name,
                    units=units,
                    device_ids=ids,
                    node_name=self._node_name,
                    logger=log,
                )
        for ids in requests:
            self._on_allocated(ids)
        return allocations

    async def pre_start(self, device_ids: tuple[str, ...]) -> None:
        definition = self._definition
        units = self._checked(device_ids, require_healthy=False)
        if definition.hooks.pre_start is not None:
            await self._run_hook(
                PRE_START,
                definition.hooks.pre_start,
                resource=definition.name,
                units=units,
                device_ids=device_ids,
                node_name=self._node_name,
                logger=log,
            )

    def _checked(self, ids: Sequence[str], *, require_healthy: bool = True) -> tuple[Unit, ...]:
        found = self.state.lookup(ids)
        if found.unknown:
            raise InvalidDevicesError(f"unknown device IDs: {_shown(found.unknown)}")
        if require_healthy and found.cleaning:
            unit = "unit" if len(found.cleaning) == 1 else "units"
            verb = "is" if len(found.cleaning) == 1 else "are"
            raise InvalidDevicesError(f"{unit} {_shown(found.cleaning)} {verb} being cleaned up")
        if require_healthy and found.unhealthy:
            raise InvalidDevicesError(f"unhealthy device IDs: {_shown(found.unhealthy)}")
        return found.units
