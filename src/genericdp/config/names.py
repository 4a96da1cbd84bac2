"""Extended resource names, checked the way the kubelet checks them, and DeviceClass names."""

from __future__ import annotations

import hashlib
import re

from genericdp.k8snames import (
    DNS1123_SUBDOMAIN_MAX,
    NATIVE_NAMESPACE,
    QUALIFIED_NAME_MAX,
    QUOTA_PREFIX,
    is_dns1123_subdomain,
    is_qualified_name_part,
)


def validate_resource_name(name: str) -> str | None:
    """Why the kubelet would refuse ``name`` as an extended resource name, or None."""
    if not name:
        return "must not be empty: use <domain>/<name>, e.g. example.com/serial"
    if name.count("/") != 1:
        return f"{name!r} must be <domain>/<name> with exactly one '/', e.g. example.com/serial"
    domain, short = name.split("/")
    if NATIVE_NAMESPACE in name:
        return f"{name!r}: the domain kubernetes.io and its subdomains are reserved for Kubernetes"
    if name.startswith(QUOTA_PREFIX):
        return f"{name!r} must not start with {QUOTA_PREFIX!r} (reserved for resource quotas)"
    return _domain_problem(name, domain) or _name_problem(name, short)


def _domain_problem(name: str, domain: str) -> str | None:
    if not domain:
        return f"{name!r} has an empty domain: use <domain>/<name>, e.g. example.com/serial"
    # The kubelet checks ``requests.<domain>``, so the domain has 9 characters less.
    limit = DNS1123_SUBDOMAIN_MAX - len(QUOTA_PREFIX)
    if len(domain) > limit:
        return f"domain of {name!r} is longer than {limit} characters"
    if not is_dns1123_subdomain(domain):
        return (
            f"domain {domain!r} of {name!r} must be a DNS subdomain: lowercase letters, digits,"
            " '-' and '.', each part starting and ending with a letter or digit"
        )
    return None


def _name_problem(name: str, short: str) -> str | None:
    if not short:
        return f"{name!r} has an empty name after '/': e.g. example.com/serial"
    if len(short) > QUALIFIED_NAME_MAX:
        return f"name part {short!r} of {name!r} is longer than {QUALIFIED_NAME_MAX} characters"
    if not is_qualified_name_part(short):
        return (
            f"name part {short!r} of {name!r} must consist of letters, digits, '-', '_' or '.',"
            " and start and end with a letter or digit"
        )
    return None


_NOT_SUBDOMAIN = re.compile(r"[^a-z0-9.-]+")
_RUNS = re.compile(r"-{2,}|\.{2,}|-\.|\.-")


def device_class_name(resource: str) -> str:
    """``example.com/serial`` -> ``serial.example.com``: the DeviceClass a DRA pod names
    (a DNS subdomain, stable). Two valid resources can derive the same one
    (``a.com/x.y`` and ``y.a.com/x``): ``device_class_collisions`` finds them."""
    prefix, _, short = resource.rpartition("/")
    plain = f"{short}.{prefix}" if prefix else short
    name = _RUNS.sub("-", _NOT_SUBDOMAIN.sub("-", plain.lower())).strip("-.")
    if name == plain and is_dns1123_subdomain(name):
        return name
    digest = hashlib.sha256(resource.encode()).hexdigest()[:8]
    head = name[: DNS1123_SUBDOMAIN_MAX - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}" if head else digest


def device_class_collision(resource: str, other: str) -> str:
    return (
        f"resources {other!r} and {resource!r} both name DeviceClass"
        f" {device_class_name(resource)!r} under DRA (one would replace the other's):"
        " rename one of them"
    )
