"""Kubernetes label selectors: label keys and values checked, and a selector
matched against a node's labels (pure: no I/O).

The rules are k8s.io/apimachinery's: ``validation.IsQualifiedName`` for keys,
``IsValidLabelValue`` for values, ``labels.NewRequirement`` for what each
operator takes, ``Requirement.Matches`` for what it means, and
``metav1.LabelSelectorAsSelector`` for the whole selector (an empty selector
selects every node; every requirement must hold; ``NotIn`` and
``DoesNotExist`` hold on a node without the key).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

MAX_PREFIX = 253  # a DNS subdomain
MAX_NAME = 63
MAX_VALUE = 63
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)


class Operator(StrEnum):
    """A ``matchExpressions`` operator."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"

    @property
    def takes_values(self) -> bool:
        return self in (Operator.IN, Operator.NOT_IN)


@dataclass(frozen=True)
class Requirement:
    """One requirement: ``key`` and ``operator`` over ``values`` (a ``matchLabels``
    entry is ``In`` with its one value)."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet it, as ``Requirement.Matches`` decides."""
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator is Operator.IN:
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator is Operator.IN and len(self.values) == 1:
            return f"{self.key}={self.values[0]}"
        word = "in" if self.operator is Operator.IN else "notin"
        return f"{self.key} {word} ({','.join(self.values)})"


@dataclass(frozen=True)
class NodeSelector:
    """Every requirement must hold; none (``nodeSelector: {}``) selects every node."""

    requirements: tuple[Requirement, ...] = ()

    def unmet(self, labels: Mapping[str, str]) -> Requirement | None:
        """The first requirement ``labels`` do not meet, or None when selected."""
        return next((r for r in self.requirements if not r.matches(labels)), None)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements) or "every node"


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a label key (a qualified name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        problem = _prefix_problem(prefix)
        if problem:
            return problem
    if not name:
        return "the name part is empty"
    if len(name) > MAX_NAME:
        return f"the name part is longer than {MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return f"the name part {name!r} must be {_NAME_RULE}"
    return None


def _prefix_problem(prefix: str) -> str | None:
    if "/" in prefix:
        return "a label key is a name with an optional DNS subdomain prefix and one '/'"
    if not prefix:
        return "the prefix before '/' is empty"
    if len(prefix) > MAX_PREFIX:
        return f"the prefix before '/' is longer than {MAX_PREFIX} characters"
    if not _DNS_SUBDOMAIN.fullmatch(prefix):
        return (
            f"the prefix {prefix!r} is not a DNS subdomain (lowercase letters, digits, '-' and"
            " '.', each part starting and ending with a letter or digit)"
        )
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is not a label value (it may be empty), or None."""
    if len(value) > MAX_VALUE:
        return f"a label value is at most {MAX_VALUE} characters"
    if value and not _NAME.fullmatch(value):
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
        problem = (
            f"{item!r} is not key=value"
            if not equals
            else (f"key {key!r}: {p}" if (p := key_problem(key)) else None)
            or (f"value {value!r} of {key}: {p}" if (p := value_problem(value)) else None)
        )
        if problem is None and key in labels:
            problem = f"label {key} is given twice"
        if problem:
            raise LabelsError(problem)
        labels[key] = value
    return labels
