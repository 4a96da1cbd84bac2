"""Kubernetes label selectors matched against a node's labels (pure: no I/O).

The rules are k8s.io/apimachinery's (``Requirement.Matches``,
``metav1.LabelSelectorAsSelector``): an empty selector selects every node;
every requirement must hold; ``NotIn`` and ``DoesNotExist`` hold on a node
without the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Operator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"

    @property
    def takes_values(self) -> bool:
        return self in (Operator.IN, Operator.NOT_IN)


@dataclass(frozen=True)
class Requirement:
    """A ``matchLabels`` entry is ``In`` with its one value."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
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
    requirements: tuple[Requirement, ...] = ()

    def unmet(self, labels: Mapping[str, str]) -> Requirement | None:
        """The first requirement not met, or None when selected."""
        return next((r for r in self.requirements if not r.matches(labels)), None)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements) or "every node"
