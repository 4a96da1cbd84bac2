"""A whole config file and one resource, with the sections of the other modules."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from genericdp.config.selector import NodeSelector
from genericdp.config.v1.allocate import AllocateSpec
from genericdp.config.v1.common import PERMISSIONS, canonical_permissions
from genericdp.config.v1.dra import DraSpec, dra_spec
from genericdp.config.v1.grouping import DEFAULT_GROUP_BY, GroupBy, group_by
from genericdp.config.v1.grouping import PROPERTY as GROUP_BY_PROPERTY
from genericdp.config.v1.health import HealthCheck, health_check
from genericdp.config.v1.hooks import Hooks, hooks
from genericdp.config.v1.labels import LabelSpec, label_spec
from genericdp.config.v1.matchers import Matcher, matcher
from genericdp.config.v1.nodeselector import node_selector

if TYPE_CHECKING:
    from genericdp.config.templates import CompiledTemplates
    from genericdp.config.yamlpos import KeyPath

CONFIG_VERSION = "v1"
UNBOUNDED = "unbounded"  # ``count: unbounded``
MAX_COUNT = 1000
DEFAULT_FREE_IDS = 4
DEFAULT_PERMISSIONS = "rw"
# Replica indices of an unbounded unit stay below this, so ``<unit>::<i>``
# fits the kubelet's 63 characters (unit IDs leave room for ``::999999``).
# A million containers holding one node at once is not a node that exists.
UNBOUNDED_INDEX_LIMIT = 1_000_000


class PreferredAllocation(StrEnum):
    PACKED = "packed"  # fill one NUMA node / parent before the next
    SPREAD = "spread"  # one per NUMA node / parent, round robin
    NONE = "none"  # GetPreferredAllocation not advertised


ROOT: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:genericdp:config:v1",
    "title": "genericdp config v1",
    "description": (
        "Hardware resources served by the genericdp Kubernetes device plugin. One file, or a"
        " directory of *.yaml/*.yml files (a ConfigMap); see docs/config.md."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "resources"],
    "properties": {
        "version": {
            "description": "Config format version; the only version is v1.",
            "const": CONFIG_VERSION,
        },
        "resources": {
            "description": "The extended resources this node advertises, one device plugin each.",
            "type": "array",
            "minItems": 1,
            "items": {"$ref": "#/$defs/resource"},
        },
    },
}

DEFS: dict[str, Any] = {
    "resource": {
        "description": (
            "One extended resource: which device nodes it counts and what a container receives."
        ),
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "match"],
        "properties": {
            "name": {
                "description": (
                    "Extended resource name <domain>/<name>, e.g. example.com/serial. The domain"
                    " is a DNS subdomain other than kubernetes.io and its subdomains; the name is"
                    " at most 63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric."
                    " Unique across all files."
                ),
                "type": "string",
                "pattern": (
                    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
                    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
                ),
            },
            "match": {
                "description": (
                    "Matchers whose results are united; each item is either {glob: ...} or"
                    " {udev: {...}}."
                ),
                "type": "array",
                "minItems": 1,
                "items": {"$ref": "#/$defs/matcher"},
            },
            "groupBy": GROUP_BY_PROPERTY,
            "count": {
                "description": (
                    "How many containers may share one unit; each unit is advertised as"
                    " <id>::0 .. <id>::<count-1> when count > 1. unbounded: any number of"
                    " containers share it, and the kubelet sees only freeIds free IDs per unit"
                    " at a time (<id>::<i>), more appearing as they are taken."
                ),
                "default": 1,
                "oneOf": [
                    {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                    {"type": "string", "const": UNBOUNDED},
                ],
            },
            "freeIds": {
                "description": (
                    "With count: unbounded, how many free IDs each unit advertises at any time"
                    f" ({DEFAULT_FREE_IDS} when not given; at least the most one container"
                    " requests). Only with count: unbounded, so the schema shows no default."
                ),
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
            },
            "permissions": {**PERMISSIONS, "default": DEFAULT_PERMISSIONS},
            "health": {"$ref": "#/$defs/health"},
            "hooks": {"$ref": "#/$defs/hooks"},
            "allocate": {"$ref": "#/$defs/allocate"},
            "preferredAllocation": {
                "description": (
                    "GetPreferredAllocation policy: packed fills one NUMA node/parent before the"
                    " next, spread takes one per NUMA node/parent in turn, none does not"
                    " advertise GetPreferredAllocation."
                ),
                "enum": [p.value for p in PreferredAllocation],
                "default": PreferredAllocation.PACKED.value,
            },
            "dra": {"$ref": "#/$defs/dra"},
            "nodeSelector": {"$ref": "#/$defs/nodeSelector"},
            "labels": {"$ref": "#/$defs/labels"},
        },
    }
}


@dataclass(frozen=True)
class Source:
    file: str
    line: int | None = None


@dataclass(frozen=True)
class ResourceDefinition:
    name: str
    match: tuple[Matcher, ...]
    group_by: GroupBy = field(default_factory=GroupBy)
    count: int = 1  # 1 with ``unbounded``
    unbounded: bool = False  # the kubelet sees ``free_ids`` per unit (deviceplugin/sharing.py)
    free_ids: int = DEFAULT_FREE_IDS
    permissions: str = DEFAULT_PERMISSIONS
    health: HealthCheck | None = None
    hooks: Hooks = field(default_factory=Hooks)
    allocate: AllocateSpec = field(default_factory=AllocateSpec)
    preferred_allocation: PreferredAllocation = PreferredAllocation.PACKED
    dra: DraSpec = field(default_factory=DraSpec)
    node_selector: NodeSelector | None = None  # None: every node serves it
    labels: LabelSpec = field(default_factory=LabelSpec)
    source: Source = field(default=Source("<memory>"), compare=False)
    # Derived from ``allocate``, so not compared.
    templates: CompiledTemplates | None = field(default=None, compare=False, repr=False)

    @property
    def id_slots(self) -> int:
        """How many replica IDs a unit may have at most (room unit IDs leave for suffixes)."""
        return UNBOUNDED_INDEX_LIMIT if self.unbounded else self.count


@dataclass(frozen=True)
class Config:
    resources: tuple[ResourceDefinition, ...]
    files: tuple[str, ...] = field(default=(), compare=False)

    def by_name(self) -> Mapping[str, ResourceDefinition]:
        return {r.name: r for r in self.resources}


def resource_definition(
    raw: dict[str, Any],
    *,
    path: KeyPath,
    file: str,
    line: int | None,
    allocate: AllocateSpec,
    templates: CompiledTemplates | None,
    seconds: Mapping[KeyPath, float],
) -> ResourceDefinition:
    """``allocate`` and ``seconds`` (every duration, by path) were computed while checking."""

    def duration(*keys: str) -> float:
        return seconds[(*path, *keys)]

    health = raw.get("health")
    unbounded = raw.get("count") == UNBOUNDED
    return ResourceDefinition(
        name=raw["name"],
        match=tuple(matcher(m) for m in raw["match"]),
        group_by=group_by(raw.get("groupBy", DEFAULT_GROUP_BY)),
        count=1 if unbounded else int(raw.get("count", 1)),
        unbounded=unbounded,
        free_ids=int(raw.get("freeIds", DEFAULT_FREE_IDS)),
        permissions=canonical_permissions(raw.get("permissions", DEFAULT_PERMISSIONS)),
        health=health_check(health, duration) if health is not None else None,
        hooks=hooks(raw.get("hooks", {}), duration),
        allocate=allocate,
        preferred_allocation=PreferredAllocation(
            raw.get("preferredAllocation", PreferredAllocation.PACKED)
        ),
        dra=dra_spec(raw.get("dra", {})),
        node_selector=node_selector(raw["nodeSelector"]) if "nodeSelector" in raw else None,
        labels=label_spec(raw.get("labels"), raw["name"]),
        source=Source(file, line),
        templates=templates,
    )
