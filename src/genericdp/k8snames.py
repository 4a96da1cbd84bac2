"""Kubernetes' name rules, one implementation for the config and the embedded kubelet.

``is_extended_resource_name`` is ``v1helper.IsExtendedResourceName``, which the
kubelet's device manager applies to every Register call: the name is not
native (it has a ``/`` and does not contain ``kubernetes.io/``), does not start
with ``requests.``, and ``"requests." + name`` passes ``IsQualifiedName``: a
DNS-1123 subdomain prefix of at most 253 characters and a name part of at most
63 characters of ``[A-Za-z0-9_.-]``, starting and ending alphanumeric.
``config.names`` says why a name fails, in these terms; the embedded kubelet
accepts and refuses exactly what the real one does.
"""

from __future__ import annotations

import re

QUOTA_PREFIX = "requests."  # the kubelet validates names with this prepended
NATIVE_NAMESPACE = "kubernetes.io/"
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


def is_dns1123_subdomain(value: str) -> bool:
    """Lowercase labels of letters, digits and ``-`` joined by ``.``, at most 253 characters."""
    return 0 < len(value) <= DNS1123_SUBDOMAIN_MAX and bool(_DNS1123_SUBDOMAIN.fullmatch(value))


def is_qualified_name_part(value: str) -> bool:
    """The name part of a qualified name: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric ends."""
    return 0 < len(value) <= QUALIFIED_NAME_MAX and bool(_QUALIFIED_NAME.fullmatch(value))


def is_extended_resource_name(name: str) -> bool:
    """True when the kubelet accepts ``name`` as an extended resource (``domain/name``)."""
    if "/" not in name or NATIVE_NAMESPACE in name or name.startswith(QUOTA_PREFIX):
        return False
    parts = (QUOTA_PREFIX + name).split("/")
    if len(parts) != 2:
        return False
    prefix, short = parts
    return is_dns1123_subdomain(prefix) and is_qualified_name_part(short)
