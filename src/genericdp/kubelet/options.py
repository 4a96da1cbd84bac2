"""The kubelet device-plugin contract's constants and plugin options, free of gRPC imports."""

from __future__ import annotations

from dataclasses import dataclass

API_VERSION = "v1beta1"
KUBELET_SOCKET_NAME = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

# The kubelet dials a registering plugin back for up to 10 s (client.go ``dial``) before it
# answers Register (1.26-1.32 deregister *by name* when that fails). Our deadline outlasts
# it, so we never give up on (and replace) a Register the kubelet is still working on.
KUBELET_DIAL_TIMEOUT = 10.0
REGISTER_TIMEOUT = KUBELET_DIAL_TIMEOUT + 5.0


@dataclass(frozen=True)
class PluginOptions:
    """What a device plugin tells the kubelet it supports (``DevicePluginOptions``)."""

    pre_start_required: bool = False
    get_preferred_allocation_available: bool = False
