"""An embedded kubelet, as far as a DRA driver can tell (tests and ``simulate``)."""

from genericdp.dra.embedded.kubelet import (
    KUBELET_1_36_HEALTH,
    KUBELET_HEALTH_SERVICES,
    KUBELET_SERVICES,
    EmbeddedDraKubelet,
)
from genericdp.dra.embedded.runtime import resolve_cdi
from genericdp.dra.embedded.state import DraEvent, DraEventKind, DraKubeletError, PreparedDevice

__all__ = [
    "KUBELET_1_36_HEALTH",
    "KUBELET_HEALTH_SERVICES",
    "KUBELET_SERVICES",
    "DraEvent",
    "DraEventKind",
    "DraKubeletError",
    "EmbeddedDraKubelet",
    "PreparedDevice",
    "resolve_cdi",
]
