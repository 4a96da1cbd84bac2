"""An embedded kubelet device manager for tests and ``simulate`` (see its ``kubelet.py``)."""

from genericdp.kubelet.embedded.admission import AllocationError
from genericdp.kubelet.embedded.kubelet import EmbeddedKubelet
from genericdp.kubelet.embedded.state import EventKind

__all__ = ["AllocationError", "EmbeddedKubelet", "EventKind"]
