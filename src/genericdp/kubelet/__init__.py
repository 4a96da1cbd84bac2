"""Everything that speaks gRPC and protobuf: the kubelet's APIs, our servicer,
registration, the PodResources client and the embedded kubelet."""
