"""One way to serve gRPC on a unix socket, for every socket the kubelet dials.

A path too long for ``sun_path`` is refused here, before gRPC fails on it obscurely.
"Our socket is still there" means the same file (``file_id``), not the same path: the
kubelet deletes every socket in its directory when it restarts.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from genericdp.errors import KubeletError

# sockaddr_un.sun_path is 108 bytes on Linux, one of which is the terminating NUL.
MAX_UNIX_PATH_BYTES = 107
# gRPC's default receive limit, which the kubelet keeps for every plugin it dials.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MESSAGE_LIMITS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)

FileId = tuple[int, int]  # st_dev, st_ino: one file, not one path (a chmod keeps it)


def unix_address(socket: Path) -> str:
    """The gRPC target ``unix:/abs/path`` for ``socket``; KubeletError if it cannot be one."""
    path = socket.absolute()
    size = len(str(path).encode())
    if size > MAX_UNIX_PATH_BYTES:
        raise KubeletError(
            f"unix socket path {path} is {size} bytes long; the limit is "
            f"{MAX_UNIX_PATH_BYTES} bytes: use a shorter directory"
        )
    return f"unix:{path}"


def file_id(path: Path, *, socket_only: bool = False) -> FileId | None:
    """Identify the file at ``path`` (None when absent, or not a socket if asked)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if socket_only and not stat.S_ISSOCK(info.st_mode):
        return None
    return info.st_dev, info.st_ino


class UnixServer:
    """A started ``grpc.aio`` server and the socket file it bound."""

    def __init__(self, server: grpc.aio.Server, socket: Path, bound: FileId | None) -> None:
        self._server = server
        self.socket = socket
        self._bound = bound

    def intact(self) -> bool:
        """Whether the socket we bound is still at its path (not deleted, not replaced)."""
        return self._bound is not None and file_id(self.socket, socket_only=True) == self._bound

    def remove(self) -> None:
        """Remove the socket when it is still the one we bound (never someone else's)."""
        if self.intact():
            self.socket.unlink(missing_ok=True)

    async def stop(self, grace: float | None, *, only_ours: bool = False) -> None:
        """Stop serving (cancelling calls after ``grace`` seconds) and remove whatever is at
        the path (``only_ours``: only the socket we bound)."""
        await self._server.stop(grace)
        if only_ours:
            self.remove()
        else:
            self.socket.unlink(missing_ok=True)


async def serve(
    socket: Path,
    handlers: Sequence[grpc.GenericRpcHandler[Any, Any]],
    *,
    what: str,
    make_dir: bool = False,
    options: Sequence[tuple[str, int]] = MESSAGE_LIMITS,
) -> UnixServer:
    """Serve ``handlers`` on ``socket``, replacing what is there; ``what`` names the server
    in errors (KubeletError when the path is too long or cannot be bound)."""
    address = unix_address(socket)
    await asyncio.to_thread(_clear, socket, make_dir=make_dir)
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers(handlers)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError as exc:
        raise KubeletError(f"cannot serve {what} on {socket}: {exc}") from exc
    if port == 0:
        raise KubeletError(f"cannot serve {what} on {socket}")
    await server.start()
    return UnixServer(server, socket, file_id(socket, socket_only=True))


def _clear(socket: Path, *, make_dir: bool) -> None:
    if make_dir:
        socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)  # a stale socket or a file put in its place: bind would fail
