"""An embedded kubelet and API server, as far as a DRA driver can tell (``simulate``;
the tests extend it in tests/dra_kubelet.py)."""

from genericdp.dra.embedded.api import EmbeddedClaims, EmbeddedSlices
from genericdp.dra.embedded.kubelet import EmbeddedDraKubelet
from genericdp.dra.embedded.runtime import UnresolvableCdiError, resolve_cdi
from genericdp.dra.embedded.state import DraKubeletError

__all__ = [
    "DraKubeletError",
    "EmbeddedClaims",
    "EmbeddedDraKubelet",
    "EmbeddedSlices",
    "UnresolvableCdiError",
    "resolve_cdi",
]
