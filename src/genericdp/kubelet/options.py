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

# The kubelet dials a registering plugin back for up to 10 s (devicemanager
# plugin/v1beta1/client.go ``dial``) before it answers Register; 1.26-1.32 then
# deregister the resource *by name* when that dial fails.
KUBELET_DIAL_TIMEOUT = 10.0
# Our Register deadline outlasts that dial-back, so we never give up on (and
# replace) a Register the kubelet is still working on.
REGISTER_TIMEOUT = KUBELET_DIAL_TIMEOUT + 5.0

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
