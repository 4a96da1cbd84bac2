"""The kubelet's own test for a device plugin's resource name.

This is ``v1helper.IsExtendedResourceName`` from Kubernetes, applied by the
kubelet to every Register call. It is kept here, apart from the config
validator, because the embedded kubelet must accept and refuse exactly what the
real one does, whatever our config layer chooses to be stricter about.
"""

from __future__ import annotations

import re

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_MAX_SUBDOMAIN = 253
_MAX_NAME = 63
# The kubelet checks the name as the quota name "requests.<name>" would be checked.
_QUOTA_PREFIX = "requests."
_NATIVE_NAMESPACE = "kubernetes.io/"


def is_extended_resource_name(name: str) -> bool:
    """True when the kubelet accepts ``name`` as an extended resource (``domain/name``)."""
    if "/" not in name or _NATIVE_NAMESPACE in name or name.startswith(_QUOTA_PREFIX):
        return False
    return _is_qualified_name(_QUOTA_PREFIX + name)


def _is_qualified_name(value: str) -> bool:
    parts = value.split("/")
    if len(parts) != 2:
        return False
    prefix, name = parts
    if not prefix or len(prefix) > _MAX_SUBDOMAIN or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        return False
    return 0 < len(name) <= _MAX_NAME and _QUALIFIED_NAME.fullmatch(name) is not None
