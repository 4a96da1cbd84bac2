"""An embedded kubelet device manager for tests and ``genericdp simulate``.

See :mod:`genericdp.kubelet.embedded.kubelet` for what it does like the real
kubelet and where it differs.
"""

from genericdp.kubelet.embedded.admission import AllocationError
from genericdp.kubelet.embedded.kubelet import EmbeddedKubelet
from genericdp.kubelet.embedded.state import EventKind

__all__ = ["AllocationError", "EmbeddedKubelet", "EventKind"]
