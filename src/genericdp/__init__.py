"""genericdp: a generic Kubernetes device plugin driven by YAML."""

__version__ = "0.1.0"
