"""What a container receives, shared by every backend: one allocation planned
from the compiled templates (``plan``), its device nodes (``devices``), the
templates rendered and what they render confined (``render``, ``confine``),
and the CDI spec files of both backends (``cdi``).

No gRPC and no kubelet types here: a backend encodes a ``Plan`` into its own
protocol's answer and commits it.
"""
