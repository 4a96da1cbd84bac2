"""Extended resource names, checked the way the kubelet checks them.

The kubelet's device manager accepts a plugin's resource name only if
``v1helper.IsExtendedResourceName`` holds: the name is not native (it has a
``/`` and does not contain ``kubernetes.io/``), does not start with
``requests.``, and ``"requests." + name`` passes ``IsQualifiedName``: a DNS-1123
subdomain prefix of at most 253 characters and a name part of at most 63
characters of ``[A-Za-z0-9_.-]``, starting and ending alphanumeric.
"""

from __future__ import annotations

import re

_QUOTA_PREFIX = "requests."  # the kubelet validates names with this prepended
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_MAX = 253
_NAME_MAX = 63


def validate_resource_name(name: str) -> str | None:
    """None when the kubelet would accept ``name`` as an extended resource name,
    else the reason, phrased for a user."""
    if not name:
        return "must not be empty: use <domain>/<name>, e.g. example.com/serial"
    if name.count("/") != 1:
        return f"{name!r} must be <domain>/<name> with exactly one '/', e.g. example.com/serial"
    domain, short = name.split("/")
    if "kubernetes.io/" in name:
        return f"{name!r}: the domain kubernetes.io and its subdomains are reserved for Kubernetes"
    if name.startswith(_QUOTA_PREFIX):
        return f"{name!r} must not start with {_QUOTA_PREFIX!r} (reserved for resource quotas)"
    return _domain_problem(name, domain) or _name_problem(name, short)


def _domain_problem(name: str, domain: str) -> str | None:
    if not domain:
        return f"{name!r} has an empty domain: use <domain>/<name>, e.g. example.com/serial"
    # The kubelet checks ``requests.<domain>``, so the domain has 9 characters less.
    limit = _DNS1123_SUBDOMAIN_MAX - len(_QUOTA_PREFIX)
    if len(domain) > limit:
        return f"domain of {name!r} is longer than {limit} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(domain):
        return (
            f"domain {domain!r} of {name!r} must be a DNS subdomain: lowercase letters, digits,"
            " '-' and '.', each part starting and ending with a letter or digit"
        )
    return None


def _name_problem(name: str, short: str) -> str | None:
    if not short:
        return f"{name!r} has an empty name after '/': e.g. example.com/serial"
    if len(short) > _NAME_MAX:
        return f"name part {short!r} of {name!r} is longer than {_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(short):
        return (
            f"name part {short!r} of {name!r} must consist of letters, digits, '-', '_' or '.',"
            " and start and end with a letter or digit"
        )
    return None
