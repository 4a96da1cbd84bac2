"""Register a device plugin with the kubelet (``v1beta1.Registration/Register``).

The kubelet dials the plugin back while it handles Register, so the plugin must already
be serving. ``before_send`` runs once connected: a kubelet that accepts connections has
already deleted the sockets in its directory, so a socket ``before_send`` finds in place
is not about to be deleted by that kubelet's start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc

from genericdp.errors import KubeletError, RegistrationError
from genericdp.grpcservices import Stub
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.options import API_VERSION, REGISTER_TIMEOUT, PluginOptions
from genericdp.kubelet.servicer import options_message
from genericdp.unixgrpc import unix_address

_READY = grpc.ChannelConnectivity.READY
_FAILED = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)
_CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),
    # No transparent retry: gRPC would resend a Register a dying kubelet never read to
    # whatever kubelet listens there by then, which deleted the socket it names after
    # ``before_send`` checked it. It must fail; the next one names a socket served anew.
    ("grpc.enable_retries", 0),
]
CONNECT_ATTEMPT = 1.0  # seconds one connection may take before a fresh one is tried


async def register(
    kubelet_socket: Path,
    *,
    endpoint: str,
    resource_name: str,
    options: PluginOptions,
    timeout: float = REGISTER_TIMEOUT,  # noqa: ASYNC109 -- also sent to the kubelet as the deadline
    before_send: Callable[[], None] = lambda: None,
) -> None:
    """Register ``resource_name`` served on ``endpoint`` (a file name in the kubelet's dir).

    ``before_send`` may raise RegistrationError to call it off. RegistrationError with the
    kubelet's message when it refuses, is missing or does not answer within ``timeout``.
    """
    try:
        target = unix_address(kubelet_socket)
    except KubeletError as exc:
        raise RegistrationError(f"cannot register {resource_name}: {exc}") from exc
    request = pb.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource_name,
        options=options_message(options),
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        # A channel of its own: with gRPC's shared subchannel pool, a connection that
        # failed to a dead kubelet's socket would be reused in its backoff, and a new
        # kubelet on the same path would go untried for up to a second.
        async with grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS) as channel:
            attempt = min(CONNECT_ATTEMPT, deadline - loop.time())
            if not await _connected(channel, kubelet_socket, attempt):
                if loop.time() < deadline:
                    continue  # a fresh connection, to whatever listens there now
                raise RegistrationError(
                    f"kubelet at {kubelet_socket} did not accept a connection in time"
                )
            before_send()
            stub = Stub(channel, pb.DESCRIPTOR.services_by_name["Registration"])
            try:
                await stub.Register(request, timeout=max(deadline - loop.time(), 0.001))
            except grpc.aio.AioRpcError as exc:
                raise RegistrationError(_describe(exc, kubelet_socket, resource_name)) from exc
            return


async def _connected(channel: grpc.aio.Channel, kubelet_socket: Path, timeout: float) -> bool:  # noqa: ASYNC109
    """Whether ``channel`` connects within ``timeout``; fails at once when nobody listens.

    One not ready by then went to a kubelet that died as we connected, and gRPC would wait
    out its handshake timeout (20 s): the caller starts over on a fresh channel instead.
    """
    try:
        async with asyncio.timeout(timeout):
            state = channel.get_state(try_to_connect=True)
            while state is not _READY:
                if state in _FAILED:
                    raise RegistrationError(f"kubelet at {kubelet_socket} is not reachable")
                await channel.wait_for_state_change(state)
                state = channel.get_state(try_to_connect=True)
    except TimeoutError:
        return False
    return True


def _describe(exc: grpc.aio.AioRpcError, kubelet_socket: Path, resource_name: str) -> str:
    code = exc.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"kubelet at {kubelet_socket} is not reachable: {exc.details()}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"kubelet at {kubelet_socket} did not answer Register for {resource_name} in time"
    return f"kubelet refused to register {resource_name}: {exc.details()}"
