"""What a container receives, shared by every backend: planned (``plan``),
rendered and confined (``render``, ``confine``), and CDI spec files (``cdi``).
No gRPC and no kubelet types here."""
