"""The kubelet's plugin registration, DRA and DRA health APIs: protos and generated stubs."""
