"""An embedded kubelet and API server, as far as a DRA driver can tell (``simulate``;
the tests extend it in tests/dra_kubelet.py)."""

from genericdp.dra.embedded.api import EmbeddedClaims, EmbeddedSlices
from genericdp.dra.embedded.calls import DraKubeletError
from genericdp.dra.embedded.kubelet import EmbeddedDraKubelet
from genericdp.dra.embedded.runtime import UnresolvableCdiError, resolve_cdi

__all__ = [
    "DraKubeletError",
    "EmbeddedClaims",
    "EmbeddedDraKubelet",
    "EmbeddedSlices",
    "UnresolvableCdiError",
    "resolve_cdi",
]
