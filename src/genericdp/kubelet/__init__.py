"""The device-plugin protocol: the kubelet's APIs, our servicer, registration, the
PodResources client, the kubelet's device IDs and the embedded kubelet. The shared core
never imports this."""
