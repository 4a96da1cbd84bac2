"""Kubernetes' name rules, one implementation for the config and the embedded kubelet
(``is_extended_resource_name`` is the kubelet's ``v1helper.IsExtendedResourceName``, so
the embedded kubelet refuses exactly what the real one does at Register)."""

from __future__ import annotations

import re

QUOTA_PREFIX = "requests."  # the kubelet validates names with this prepended
NATIVE_NAMESPACE = "kubernetes.io/"
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
LABEL_VALUE_MAX = 63
_NAME_RULE = (
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)


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
    if len(parts) != 2:  # noqa: PLR2004 -- prefix/name
        return False
    prefix, short = parts
    return is_dns1123_subdomain(prefix) and is_qualified_name_part(short)


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (a qualified name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        problem = _prefix_problem(prefix)
        if problem:
            return problem
    if not name:
        return "the name part is empty"
    if len(name) > QUALIFIED_NAME_MAX:
        return f"the name part is longer than {QUALIFIED_NAME_MAX} characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return f"the name part {name!r} must be {_NAME_RULE}"
    return None


def _prefix_problem(prefix: str) -> str | None:
    if "/" in prefix:
        return "a label key is a name with an optional DNS subdomain prefix and one '/'"
    if not prefix:
        return "the prefix before '/' is empty"
    if len(prefix) > DNS1123_SUBDOMAIN_MAX:
        return f"the prefix before '/' is longer than {DNS1123_SUBDOMAIN_MAX} characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        return (
            f"the prefix {prefix!r} is not a DNS subdomain (lowercase letters, digits, '-' and"
            " '.', each part starting and ending with a letter or digit)"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (it may be empty), or None."""
    if len(value) > LABEL_VALUE_MAX:
        return f"a label value is at most {LABEL_VALUE_MAX} characters"
    if value and not _QUALIFIED_NAME.fullmatch(value):
        return f"a label value must be empty or {_NAME_RULE}"
    return None


class LabelsError(ValueError):
    """Text given as ``k=v,...`` that is not a set of node labels."""


def parse_labels(text: str) -> dict[str, str]:
    """Labels written ``key=value,key2=value2`` (``--node-labels``); raises LabelsError."""
    labels: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals:
            raise LabelsError(f"{item!r} is not key=value")
        if problem := label_key_problem(key):
            raise LabelsError(f"key {key!r}: {problem}")
        if problem := label_value_problem(value):
            raise LabelsError(f"value {value!r} of {key}: {problem}")
        if key in labels:
            raise LabelsError(f"label {key} is given twice")
        labels[key] = value
    return labels
