"""An embedded kubelet, as far as a DRA driver can tell (tests and ``simulate``)."""

from genericdp.dra.embedded.kubelet import (
    KUBELET_SERVICES,
    DraKubeletError,
    EmbeddedDraKubelet,
    PreparedDevice,
)
from genericdp.dra.embedded.runtime import resolve_cdi

__all__ = [
    "KUBELET_SERVICES",
    "DraKubeletError",
    "EmbeddedDraKubelet",
    "PreparedDevice",
    "resolve_cdi",
]
