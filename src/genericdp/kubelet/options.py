"""Constants of the kubelet device-plugin wire contract, and the options a plugin registers.

Kept free of gRPC imports so the runtime can name options without pulling in stubs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genericdp.errors import KubeletError

API_VERSION = "v1beta1"
KUBELET_SOCKET_NAME = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# sockaddr_un.sun_path is 108 bytes on Linux, one of which is the terminating NUL.
MAX_UNIX_PATH_BYTES = 107


@dataclass(frozen=True)
class PluginOptions:
    """What a device plugin tells the kubelet it supports (``DevicePluginOptions``)."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False


def unix_address(socket: Path) -> str:
    """Return the gRPC target ``unix:/abs/path`` for ``socket``.

    Raises KubeletError when the path cannot be a unix socket address: gRPC would
    otherwise fail later with an obscure message (or silently truncate).
    """
    path = socket.absolute()
    size = len(str(path).encode())
    if size > MAX_UNIX_PATH_BYTES:
        raise KubeletError(
            f"unix socket path {path} is {size} bytes long; the limit is "
            f"{MAX_UNIX_PATH_BYTES} bytes: use a shorter directory"
        )
    return f"unix:{path}"
