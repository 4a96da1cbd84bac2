"""The frozen, validated form of a config v1 file.

Everything here is built once by ``genericdp.config.load`` after the JSON
Schema and the semantic checks pass; nothing downstream sees raw YAML.
Equality of two ``ResourceDefinition`` values means "nothing to do" for the
reconciler, so compiled templates are excluded from comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from genericdp.config.templates import CompiledTemplates

CONFIG_VERSION = "v1"


def frozen_map(values: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only mapping with sorted keys, so equal configs compare equal."""
    return MappingProxyType(dict(sorted((values or {}).items())))


@dataclass(frozen=True)
class GlobMatcher:
    """Device nodes whose host path matches ``pattern`` (an absolute host path glob)."""

    pattern: str


@dataclass(frozen=True)
class UdevMatcher:
    """Device nodes found through sysfs, filtered like a udev rule.

    Every given field must match. ``kernel`` and attribute/property values are
    fnmatch patterns. ``attributes`` match on the device or any ancestor (udev
    ``ATTRS``); ``driver`` likewise (udev ``DRIVERS``); ``properties`` come from
    the udev database.
    """

    subsystem: str | None = None
    kernel: str | None = None
    driver: str | None = None
    attributes: Mapping[str, str] = field(default_factory=frozen_map)
    properties: Mapping[str, str] = field(default_factory=frozen_map)


Matcher = GlobMatcher | UdevMatcher


@dataclass(frozen=True)
class GroupBy:
    """How matched nodes form units.

    - ``node``: every node is its own unit.
    - ``all``: all matched nodes form one unit.
    - ``parent``: nodes sharing the nearest sysfs ancestor of ``subsystem``
      (for example ``usb`` or ``pci``) form one unit.
    - ``pathRegex``: nodes whose matched (container) path yields the same key from
      ``pattern`` (named group ``key``, else the first group, else the whole
      match) form one unit; nodes that do not match are dropped.
    """

    kind: Literal["node", "all", "parent", "pathRegex"] = "node"
    subsystem: str | None = None
    pattern: str | None = None

    def __str__(self) -> str:
        if self.kind == "parent":
            return f"parent:{self.subsystem}"
        if self.kind == "pathRegex":
            return f"pathRegex:{self.pattern}"
        return self.kind


@dataclass(frozen=True)
class Exec:
    """An argv list run without a shell, with a timeout in seconds."""

    argv: tuple[str, ...]
    timeout: float


@dataclass(frozen=True)
class HealthCheck:
    """A probe run per unit every ``interval`` seconds.

    A unit turns Unhealthy after ``failure_threshold`` consecutive failures
    (non-zero exit or timeout) and Healthy again after one success.
    """

    exec: Exec
    interval: float = 10.0
    failure_threshold: int = 3


@dataclass(frozen=True)
class Hooks:
    """Commands run around a container's use of a unit."""

    init: Exec | None = None  # in Allocate, before the container gets the unit
    pre_start: Exec | None = None  # in PreStartContainer (makes it required)
    cleanup: Exec | None = None  # after release, and when a unit is removed


@dataclass(frozen=True)
class MountTemplate:
    """A mount whose paths are Jinja2 template sources."""

    host_path: str
    container_path: str
    read_only: bool = False


@dataclass(frozen=True)
class AllocateSpec:
    """What a container receives, as template sources."""

    env: Mapping[str, str] = field(default_factory=frozen_map)
    mounts: tuple[MountTemplate, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi: bool = False  # also publish a CDI spec and return CDI names (allocation.cdi)


class PreferredAllocation(StrEnum):
    """Policy for GetPreferredAllocation."""

    PACKED = "packed"  # fill one NUMA node / parent before the next
    SPREAD = "spread"  # one per NUMA node / parent, round robin
    NONE = "none"  # GetPreferredAllocation not advertised


@dataclass(frozen=True)
class Source:
    """Where a definition came from, for messages."""

    file: str
    line: int | None = None


@dataclass(frozen=True)
class Version:
    """A ``{version: 1.2.3}`` attribute value (semver 2.0)."""

    version: str


AttributeValue = str | int | bool | Version


@dataclass(frozen=True)
class DraSpec:
    """What only the DRA backend uses: attributes for every device of the resource."""

    attributes: Mapping[str, AttributeValue] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class ResourceDefinition:
    """One extended resource served by one device plugin."""

    name: str
    match: tuple[Matcher, ...]
    group_by: GroupBy = field(default_factory=GroupBy)
    count: int = 1
    permissions: str = "rw"
    health: HealthCheck | None = None
    hooks: Hooks = field(default_factory=Hooks)
    allocate: AllocateSpec = field(default_factory=AllocateSpec)
    preferred_allocation: PreferredAllocation = PreferredAllocation.PACKED
    dra: DraSpec = field(default_factory=DraSpec)
    source: Source = field(default=Source("<memory>"), compare=False)
    # Built once at load time from ``allocate``; derived, so not compared.
    templates: CompiledTemplates | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Config:
    """A whole validated config: every resource of every file."""

    resources: tuple[ResourceDefinition, ...]
    files: tuple[str, ...] = field(default=(), compare=False)

    def by_name(self) -> Mapping[str, ResourceDefinition]:
        return {r.name: r for r in self.resources}
