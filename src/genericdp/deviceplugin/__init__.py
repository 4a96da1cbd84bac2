"""The device-plugin backend: one device plugin per resource, registered with the kubelet.
It drives ``runtime`` through ``runtime.backend.Backend`` and never imports ``dra``."""
