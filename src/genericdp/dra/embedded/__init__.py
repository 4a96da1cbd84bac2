"""An embedded kubelet, as far as a DRA driver can tell (tests and ``simulate``)."""

from genericdp.dra.embedded.kubelet import (
    KUBELET_1_36_HEALTH,
    KUBELET_HEALTH_SERVICES,
    KUBELET_SERVICES,
    EmbeddedDraKubelet,
)
from genericdp.dra.embedded.runtime import CreatedNode, created_nodes, resolve_cdi
from genericdp.dra.embedded.state import DraEvent, DraEventKind, DraKubeletError, PreparedDevice

__all__ = [
    "KUBELET_1_36_HEALTH",
    "KUBELET_HEALTH_SERVICES",
    "KUBELET_SERVICES",
    "CreatedNode",
    "DraEvent",
    "DraEventKind",
    "DraKubeletError",
    "EmbeddedDraKubelet",
    "PreparedDevice",
    "created_nodes",
    "resolve_cdi",
]
