"""The device-plugin backend: one device plugin per resource, registered with the kubelet.

It sits above ``runtime`` (whose runner, supervisor and allocator it drives
through ``runtime.backend.Backend``) and speaks the kubelet's device-plugin
protocol through ``kubelet`` (protos, servicer, registration, PodResources).
It never imports ``dra``.
"""
