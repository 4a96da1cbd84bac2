"""The device-plugin protocol: the kubelet's APIs (gRPC and protobuf), our
servicer, registration, the PodResources client, the kubelet's device IDs
(``devices``) and the embedded kubelet. The shared core never imports this."""
