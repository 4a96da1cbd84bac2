"""What the Go helper ``k8s.io/dynamic-resource-allocation/kubeletplugin`` does for a driver.

The sockets and their names, registration with the kubelet, the DRA gRPC
stubs (``api``), the hand-over between two instances on one node (node
lock), claim reads from the API server, and ResourceSlice publishing (store,
watch, publisher). The driver behind it (``genericdp.dra``: prepare,
unprepare, checkpoint, CDI) imports it; it imports neither the driver nor the
runtime.
"""
