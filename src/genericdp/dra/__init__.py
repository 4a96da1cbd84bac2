"""The DRA backend: the same resource definitions served as a DRA driver (DESIGN.md section 6).

It sits above ``runtime`` (whose supervisor, watches and recorder it reuses)
and beside the device-plugin protocol in ``kubelet``, which it never imports.
"""
