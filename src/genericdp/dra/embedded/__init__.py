"""An embedded kubelet and API server, as far as a DRA driver can tell (``simulate``, tests)."""

from genericdp.dra.embedded.api import EmbeddedClaims, EmbeddedSlices
from genericdp.dra.embedded.kubelet import KUBELET_1_36_HEALTH, EmbeddedDraKubelet
from genericdp.dra.embedded.runtime import UnresolvableCdiError, resolve_cdi
from genericdp.dra.embedded.state import DraEventKind, DraKubeletError

__all__ = [
    "KUBELET_1_36_HEALTH",
    "DraEventKind",
    "DraKubeletError",
    "EmbeddedClaims",
    "EmbeddedDraKubelet",
    "EmbeddedSlices",
    "UnresolvableCdiError",
    "resolve_cdi",
]
