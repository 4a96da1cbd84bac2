"""What the Go helper ``k8s.io/dynamic-resource-allocation/kubeletplugin`` does for a driver.

Sockets, registration, the DRA gRPC stubs (``api``), the node lock, claim reads and
ResourceSlice publishing. It imports neither the driver (``genericdp.dra``) nor the runtime.
"""
