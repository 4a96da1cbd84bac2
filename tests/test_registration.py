"""Registering with the kubelet: success, refusals and an absent or silent kubelet."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from genericdp.errors import RegistrationError
from genericdp.grpcservices import service_handler
from genericdp.kubelet.api import deviceplugin_pb2 as pb
from genericdp.kubelet.options import PluginOptions
from genericdp.kubelet.registration import register
from tests.kubelet_fakes import EmbeddedKubelet, FakePlugin, device, serving

SERIAL = "example.com/serial"


async def test_register_is_accepted_after_the_kubelet_dials_back(base: Path) -> None:
    """When register returns, the kubelet already knows the resource and its endpoint."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        plugin = FakePlugin([device("d1")], get_preferred_allocation_available=True)
        async with serving(plugin, kubelet.plugin_dir / "serial-1.sock"):
            await register(
                kubelet.socket,
                endpoint="serial-1.sock",
                resource_name=SERIAL,
                options=PluginOptions(get_preferred_allocation_available=True),
            )
            snap = kubelet.resources[SERIAL]
            assert (snap.endpoint, snap.connected, snap.registrations) == ("serial-1.sock", True, 1)
            assert snap.options == PluginOptions(get_preferred_allocation_available=True)


async def test_refusal_carries_the_kubelets_message(base: Path) -> None:
    """A refused Register raises RegistrationError with the kubelet's own words."""
    async with EmbeddedKubelet(base / "dp") as kubelet:
        with pytest.raises(RegistrationError) as caught:
            await register(
                kubelet.socket, endpoint="x.sock", resource_name="serial", options=PluginOptions()
            )
    message = str(caught.value)
    assert message == 'kubelet refused to register serial: the ResourceName "serial" is invalid'
    assert isinstance(caught.value.__cause__, grpc.aio.AioRpcError)


async def test_missing_kubelet_socket_is_a_registration_error(base: Path) -> None:
    """No kubelet listening gives a RegistrationError naming the socket, not a gRPC error."""
    socket = base / "kubelet.sock"
    with pytest.raises(RegistrationError, match="is not reachable") as caught:
        await register(socket, endpoint="x.sock", resource_name=SERIAL, options=PluginOptions())
    assert str(socket) in str(caught.value)


async def test_silent_kubelet_times_out(base: Path) -> None:
    """A kubelet that does not answer within the timeout gives a RegistrationError."""
    # The kubelet waits up to 5 s to dial a plugin socket that nobody serves.
    async with EmbeddedKubelet(base / "dp", dial_timeout=5.0) as kubelet:
        with pytest.raises(RegistrationError, match="did not answer Register"):
            await register(
                kubelet.socket,
                endpoint="nobody.sock",
                resource_name=SERIAL,
                options=PluginOptions(),
                timeout=0.2,
            )


async def test_socket_path_too_long_is_a_registration_error(base: Path) -> None:
    """A kubelet socket path beyond the unix limit is refused before dialing."""
    socket = base / ("d" * 100) / "kubelet.sock"
    with pytest.raises(RegistrationError, match="limit is 107 bytes"):
        await register(socket, endpoint="x.sock", resource_name=SERIAL, options=PluginOptions())


# -- a kubelet that dies with our Register unread ----------------------------------------

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _HEADERS, _GOAWAY = 0x4, 0x1, 0x7
_ACK = 0x1


def _frame(kind: int, flags: int = 0, payload: bytes = b"", stream: int = 0) -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload
    )


class Recording:
    """A kubelet's Registration service that accepts and keeps every request."""

    def __init__(self) -> None:
        self.requests: list[pb.RegisterRequest] = []

    async def Register(
        self,
        request: pb.RegisterRequest,
        context: grpc.aio.ServicerContext[object, object],  # noqa: ARG002 -- the gRPC signature
    ) -> pb.Empty:
        self.requests.append(request)
        return pb.Empty()


async def test_a_register_the_dying_kubelet_never_read_is_not_sent_to_the_next(
    base: Path,
) -> None:
    """A kubelet that dies with our Register unread fails it; it never reaches the next one."""
    kubelet_sock = base / "kubelet.sock"
    # The next kubelet is listening, its socket ready to take the path.
    successor = Recording()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        [service_handler(pb.DESCRIPTOR.services_by_name["Registration"], successor)]
    )
    server.add_insecure_port(f"unix:{base / 'next.sock'}")
    await server.start()
    died = asyncio.Event()

    async def dying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # HTTP/2 by hand: our settings, an ack of the client's, then the client's frames
        # until its Register (a HEADERS frame) is on the wire.
        await reader.readexactly(len(_PREFACE))
        writer.write(_frame(_SETTINGS))
        while True:
            head = await reader.readexactly(9)
            await reader.readexactly(int.from_bytes(head[:3], "big"))
            kind, flags = head[3], head[4]
            if kind == _SETTINGS and not flags & _ACK:
                writer.write(_frame(_SETTINGS, _ACK))
            if kind == _HEADERS:
                break
        # Replaced by the next kubelet, and gone with the Register unread (last
        # stream 0: none was processed, so gRPC may send it again elsewhere).
        (base / "next.sock").rename(kubelet_sock)
        writer.write(_frame(_GOAWAY, payload=bytes(8)))
        await writer.drain()
        writer.close()
        died.set()

    first = await asyncio.start_unix_server(dying, path=str(kubelet_sock))
    try:
        with pytest.raises(RegistrationError, match="is not reachable"):
            await register(
                kubelet_sock, endpoint="x.sock", resource_name=SERIAL, options=PluginOptions()
            )
        assert died.is_set()
        assert successor.requests == []
    finally:
        first.close()
        await server.stop(None)
