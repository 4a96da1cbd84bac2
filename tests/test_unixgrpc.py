"""The one unix-socket gRPC starter: path length, stale files, identity by inode, limits."""

from __future__ import annotations

import socket as socketlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from genericdp.errors import KubeletError
from genericdp.kubeletplugin.registration import RegistrationServer, RegistrationService
from genericdp.unixgrpc import (
    MAX_MESSAGE_BYTES,
    MAX_UNIX_PATH_BYTES,
    UnixServer,
    file_id,
    serve,
    unix_address,
)


async def _echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:  # noqa: ARG001 -- the gRPC method's signature
    return request


async def _double(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:  # noqa: ARG001 -- the gRPC method's signature
    return request * 2


# bytes in and out: no (de)serializers
_ECHO = [
    grpc.method_handlers_generic_handler(
        "test.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(_echo),
            "Double": grpc.unary_unary_rpc_method_handler(_double),
        },
    )
]


async def _call(socket: Path, payload: bytes, method: str = "Echo") -> bytes:
    """A client with no limits of its own (up to 16 MiB)."""
    limit = 4 * MAX_MESSAGE_BYTES
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
    ]
    async with grpc.aio.insecure_channel(unix_address(socket), options=options) as channel:
        call = channel.unary_unary(f"/test.Echo/{method}", None, None)
        reply: bytes = await call(payload, timeout=10)
        return reply


@pytest.fixture
async def echo(base: Path) -> AsyncIterator[UnixServer]:
    server = await serve(base / "echo.sock", _ECHO, what="echo")
    yield server
    await server.stop(None)


def _path_of(base: Path, size: int) -> Path:
    name = "s" * (size - len(str(base.absolute()).encode()) - 1)
    return base / name


def test_the_path_limit_is_107_bytes(base: Path) -> None:
    """A 107-byte path is an address; one byte more is refused, naming the path."""
    assert unix_address(_path_of(base, MAX_UNIX_PATH_BYTES)).startswith("unix:/")
    too_long = _path_of(base, MAX_UNIX_PATH_BYTES + 1)
    with pytest.raises(KubeletError, match="108 bytes long; the limit is 107"):
        unix_address(too_long)


async def test_serve_refuses_a_path_too_long(base: Path) -> None:
    """Serving on a 108-byte path fails before gRPC can truncate it, and binds nothing."""
    with pytest.raises(KubeletError, match="limit is 107"):
        await serve(_path_of(base, MAX_UNIX_PATH_BYTES + 1), _ECHO, what="echo")
    assert not any(base.iterdir())  # noqa: ASYNC240 -- a directory of one test


async def test_serves_and_answers(echo: UnixServer) -> None:
    """What is served on the socket answers, and the socket is the one bound."""
    assert await _call(echo.socket, b"ping") == b"ping"
    assert echo.intact()


async def test_a_stale_file_is_replaced(base: Path) -> None:
    """A regular file or a predecessor's socket at the path does not stop the bind."""
    path = base / "stale.sock"
    path.write_text("left behind")
    first = await serve(path, _ECHO, what="echo")
    assert await _call(path, b"one") == b"one"
    await first._server.stop(None)
    second = await serve(path, _ECHO, what="echo")
    assert await _call(path, b"two") == b"two"
    await second.stop(None)
    assert not path.exists()


async def test_make_dir_creates_the_directory(base: Path) -> None:
    """``make_dir`` creates the socket's directory; without it, a missing one is an error."""
    with pytest.raises(KubeletError, match="cannot serve echo on"):
        await serve(base / "missing" / "echo.sock", _ECHO, what="echo")
    server = await serve(base / "made" / "echo.sock", _ECHO, what="echo", make_dir=True)
    assert server.intact()
    await server.stop(None)


async def test_identity_is_the_file_not_the_path(echo: UnixServer) -> None:
    """Deleted, or replaced by another socket at the same path: no longer intact."""
    bound = file_id(echo.socket, socket_only=True)
    assert bound is not None
    echo.socket.chmod(0o600)
    assert echo.intact(), "a chmod keeps the file"
    echo.socket.unlink()
    assert not echo.intact()
    with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as other:
        other.bind(str(echo.socket))
        assert file_id(echo.socket, socket_only=True) not in (None, bound)
        assert not echo.intact()


def test_file_id_of_a_regular_file(base: Path) -> None:
    """A regular file has an identity, but is no socket."""
    path = base / "file"
    path.write_text("")
    assert file_id(path) is not None
    assert file_id(path, socket_only=True) is None
    assert file_id(base / "absent") is None


async def test_stop_only_ours_keeps_another_file(base: Path) -> None:
    """A file put at our path by someone else survives ``stop(only_ours=True)``, not ``stop``."""
    path = base / "fixed.sock"
    server = await serve(path, _ECHO, what="echo")
    path.unlink()
    path.write_text("someone else's")
    await server.stop(None, only_ours=True)
    server.remove()
    assert path.read_text() == "someone else's"
    again = await serve(path, _ECHO, what="echo")
    path.unlink()
    path.write_text("someone else's")
    await again.stop(None)
    assert not path.exists()


async def test_messages_are_bounded_both_ways(echo: UnixServer) -> None:
    """Requests and answers over the kubelet's 4 MiB are refused; just under passes."""
    fits = b"x" * (MAX_MESSAGE_BYTES - 64)
    assert await _call(echo.socket, fits) == fits
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _call(echo.socket, b"x" * (MAX_MESSAGE_BYTES + 1))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    half = b"x" * (MAX_MESSAGE_BYTES // 2 + 1)
    with pytest.raises(grpc.aio.AioRpcError) as unsent:
        await _call(echo.socket, half, "Double")
    assert unsent.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_dra_registration_checks_the_path_length(base: Path) -> None:
    """The DRA registration socket gets the same 107-byte check as every other socket."""
    socket = _path_of(base, MAX_UNIX_PATH_BYTES + 1)
    server = RegistrationServer(
        RegistrationService("gdp.example.com", base / "dra.sock", ()), socket
    )
    with pytest.raises(KubeletError, match="limit is 107"):
        await server.start()
    assert not server.intact()
