"""One resource's registration with the kubelet: its socket and server, Register, the stream.

The kubelet dials the plugin back while it handles Register, so the server is
serving before Register is sent. Registration runs in its own loop, woken at
start, when the kubelet restarts and when the kubelet ends our ListAndWatch
stream (it never reopens one). Requests close together are merged; a failed
attempt is retried with backoff, or at once when a new request comes. What
the loop guarantees, and why (kubelets up to 1.32 drop a live client when a
dial-back fails): docs/contributing/architecture.md, "Registration".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from genericdp.aio import Backoff, wait_event
from genericdp.deviceplugin.kubeletwatch import DirChange
from genericdp.deviceplugin.sockets import socket_path
from genericdp.errors import KubeletError, RegistrationError
from genericdp.kubelet.options import KUBELET_SOCKET_NAME, REGISTER_TIMEOUT, PluginOptions
from genericdp.kubelet.registration import register
from genericdp.runtime.context import ResourceContext
from genericdp.unixgrpc import MAX_UNIX_PATH_BYTES, FileId, UnixServer, file_id

log = logging.getLogger(__name__)

# The kubelet opens ListAndWatch as soon as Register is accepted (runClient);
# generous for a loaded node: a stream arriving after we gave up would be
# taken for another client's, and a second Register would follow.
STREAM_WAIT = 5.0
SETTLE = 0.05  # seconds a burst of requests may take (one kubelet restart)

Serve = Callable[[Path], Awaitable[UnixServer]]


class Registrar:
    """Serves one resource's socket and keeps it registered with the kubelet;
    ``resource`` and ``options`` are read at each Register (a reload may change them)."""

    def __init__(
        self,
        resource: Callable[[], str],
        options: Callable[[], PluginOptions],
        context: ResourceContext,
        serve: Serve,
        *,
        plugin_dir: Path,
    ) -> None:
        self._resource = resource
        self._options = options
        self._start_server = serve
        self._metrics = context.recorder
        self._plugin_dir = plugin_dir
        self._on_status = context.on_status
        self._backoff = Backoff()
        self._server: UnixServer | None = None
        self._socket_lost = asyncio.Event()  # set when it is deleted or replaced
        self._wanted = asyncio.Event()
        self._reasons: list[str] = []
        self.registered = False
        self._kubelet_id: FileId | None = None  # the kubelet.sock we registered with
        self.registrations = 0
        self.streams = 0
        self._next_token = 0
        self._claiming = False  # a Register in flight: its kubelet stream is next
        self._kubelet_stream: int | None = None  # token of the kubelet's open stream
        self._kubelet_streams = 0  # streams attributed to the kubelet, ever
        self._stream_changed = asyncio.Event()
        self.last_error: str | None = None
        self._closing = False
        self._renew = False  # the next attempt serves a fresh socket

    @property
    def resource(self) -> str:
        return self._resource()

    @property
    def socket(self) -> Path | None:
        return self._server.socket if self._server is not None else None

    def wake(self, reason: str, *, renew: bool = False) -> None:
        """Ask the registration loop to Register (again) unless the one in place is sound;
        ``renew``: on a fresh socket (the options changed)."""
        if renew:
            self._renew = True
        self._reasons.append(reason)
        self._wanted.set()
        self._stream_changed.set()  # wakes a wait for the kubelet's stream: kubelet gone?

    def plugin_dir_changed(self, change: DirChange) -> None:
        """Our socket deleted or replaced: serve again, even during a Register."""
        socket = self.socket
        if socket is not None and socket.name in change.deleted | change.created:
            self._socket_changed()

    def _socket_changed(self) -> None:
        if self._closing or self._server is None or self._socket_intact():
            return  # our own bind, or a stop of ours
        self._socket_lost.set()
        self.wake("our socket was deleted or replaced")

    async def run(self) -> None:
        """Serve and Register whenever asked, until cancelled."""
        while True:
            await self._wanted.wait()
            await asyncio.sleep(SETTLE)  # merge a burst (one kubelet restart)
            self._wanted.clear()
            reasons, self._reasons = ", ".join(dict.fromkeys(self._reasons)), []
            try:
                await self._register_until_done(reasons)
            except Exception:
                # A bug of ours: the task guard logs it and runs us again, which
                # must then still register.
                self.wake("retry after an error")
                raise

    async def close(self) -> None:
        """Stop the server (3 s for its calls to finish) and remove its socket."""
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            await server.stop(3.0)
            log.info("%s: stopped serving on %s", self.resource, server.socket)
        self.registered = False
        self._on_status()

    def stream_opened(self) -> int:
        self.streams += 1
        self._next_token += 1
        token = self._next_token
        if self._claiming and self._kubelet_stream is None:
            self._kubelet_stream = token  # the kubelet's, opened for our Register
            self._kubelet_streams += 1
            self._stream_changed.set()
        self._on_status()
        return token

    def stream_closed(self, token: int, *, by_peer: bool) -> None:
        self.streams -= 1
        if token == self._kubelet_stream:
            self._kubelet_stream = None
            self.registered = False
            self._stream_changed.set()
            if by_peer and not self._closing:
                log.warning("%s: the kubelet ended ListAndWatch", self.resource)
                self.wake("kubelet ended ListAndWatch")
        self._on_status()

    async def _register_until_done(self, reasons: str) -> None:
        self._backoff.reset()
        while not await self._attempt(reasons):
            delay = self._backoff.next()
            await wait_event(self._wanted, delay)
            if self._wanted.is_set():  # asked again (a new kubelet.sock?): try now
                await asyncio.sleep(SETTLE)
                self._wanted.clear()
                self._backoff.reset()
                reasons = ", ".join(dict.fromkeys(self._reasons)) or reasons
                self._reasons = []

    def _sound(self, kubelet: Path) -> bool:
        """Whether the registration in place needs nothing: same kubelet, its stream, our socket."""
        return (
            self.registered
            and self._kubelet_stream is not None
            and not self._renew
            and self._socket_intact()
            and self._kubelet_id is not None
            and self._kubelet_id == file_id(kubelet)
        )

    async def _attempt(self, reasons: str) -> bool:
        kubelet = self._plugin_dir / KUBELET_SOCKET_NAME
        if self._sound(kubelet):
            log.debug("%s: registration in place is sound (%s)", self.resource, reasons)
            return True
        self.registered = False
        # Whatever stream the kubelet had is not ours to watch any more: a
        # restarted kubelet ended it, or it belongs to a kubelet being replaced.
        self._kubelet_stream = None
        try:
            server = await self._ensure_serving()
        except KubeletError as exc:
            return self._failed(str(exc))
        if not kubelet.exists():
            return self._failed(f"waiting for the kubelet: {kubelet} does not exist")
        endpoint = server.socket.name
        self._claiming = True
        seen = self._kubelet_streams
        try:
            await self._register(kubelet, server.socket)
            self.registrations += 1  # accepted; complete once the kubelet's stream is open
            if not await self._kubelet_stream_opened(seen, kubelet):
                return self._failed("the kubelet accepted Register but has no ListAndWatch open")
        except KubeletError as exc:  # RegistrationError, or our socket could not be served
            return self._failed(str(exc))
        finally:
            self._claiming = False
        self.registered = True
        self._metrics.registration(self.resource, ok=True)
        self.last_error = None
        log.info(
            "%s: registered with the kubelet, endpoint %s (%s)", self.resource, endpoint, reasons
        )
        self._on_status()
        return True

    async def _register(self, kubelet: Path, path: Path) -> None:
        """Send one Register naming ``path``; serve it again if it is lost meanwhile."""

        def check() -> None:  # connected: this kubelet has cleaned its directory already
            if not self._socket_intact():
                raise RegistrationError(f"{path} is no longer our socket; not naming it")
            self._kubelet_id = file_id(kubelet)

        self._socket_lost.clear()
        call = asyncio.ensure_future(
            register(
                kubelet,
                endpoint=path.name,
                resource_name=self.resource,
                options=self._options(),
                timeout=REGISTER_TIMEOUT,
                before_send=check,
            )
        )
        try:
            while True:
                lost = asyncio.ensure_future(self._socket_lost.wait())
                try:
                    await asyncio.wait((call, lost), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    lost.cancel()
                if call.done():
                    call.result()
                    return
                # Deleted or replaced while the kubelet may be dialing it: the
                # Register names this path, so it must be served again now.
                self._socket_lost.clear()
                log.warning("%s: %s lost during Register; serving it again", self.resource, path)
                await self._serve(path)
        finally:
            call.cancel()

    async def _kubelet_stream_opened(self, seen: int, kubelet: Path) -> bool:
        """Wait (``STREAM_WAIT``) for the kubelet's ListAndWatch; False if none or it ended.
        Early when that kubelet is gone: ``kubelet.sock`` replaced, or our socket
        deleted (a new ``kubelet.sock`` may well reuse the old one's inode)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STREAM_WAIT
        while self._kubelet_streams == seen:
            remaining = deadline - loop.time()
            gone = file_id(kubelet) != self._kubelet_id or not self._socket_intact()
            if remaining <= 0 or gone:
                break
            self._stream_changed.clear()
            await wait_event(self._stream_changed, remaining)
        return self._kubelet_stream is not None

    def _failed(self, message: str) -> bool:
        if message != self.last_error:
            log.warning("%s: not registered: %s", self.resource, message)
        self.last_error = message
        self._metrics.registration(self.resource, ok=False)
        self._on_status()
        return False

    def _socket_intact(self) -> bool:
        return self._server is not None and self._server.intact()

    async def _ensure_serving(self) -> UnixServer:
        """Serve on a fresh socket unless the current one is still in place (a fresh
        name never collides with what the kubelet knows)."""
        if self._server is not None and self._socket_intact() and not self._renew:
            return self._server
        self._renew = False
        path, shortened = socket_path(self._plugin_dir, self.resource)
        if shortened:
            log.info(
                "%s: socket name shortened to fit %d bytes", self.resource, MAX_UNIX_PATH_BYTES
            )
        return await self._serve(path)

    async def _serve(self, path: Path) -> UnixServer:
        """Stop the current server (if any) and serve on ``path``, replacing what is there."""
        server, self._server = self._server, None
        if server is not None:
            # At once: its socket is gone (its streams are a dead kubelet's or
            # another client's) or being replaced, and the kubelet waits for the new one.
            await server.stop(None)
        self._server = new = await self._start_server(path)  # a file left at our name is cleared
        log.info("%s: serving on %s", self.resource, path)
        return new
