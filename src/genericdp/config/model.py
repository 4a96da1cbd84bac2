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
UNBOUNDED = "unbounded"  # ``count: unbounded``
DEFAULT_FREE_IDS = 4
# Replica indices of an unbounded unit stay below this, so ``<unit>::<i>``
# fits the kubelet's 63 characters (unit IDs leave room for ``::999999``).
# A million containers holding one node at once is not a node that exists.
UNBOUNDED_INDEX_LIMIT = 1_000_000


def frozen_map(values: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only mapping with sorted keys, so equal configs compare equal."""
    return MappingProxyType(dict(sorted((values or {}).items())))


@dataclass(frozen=True)
class GlobMatcher:
    """Device nodes whose host path matches ``pattern`` (an absolute host path glob)."""

    pattern: str
    # A template per matched node (``device``): where the container sees it.
    container_path: str | None = None


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
    container_path: str | None = None  # as GlobMatcher.container_path


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
class SysfsProbe:
    """A sysfs attribute of the unit's device or an ancestor, compared with a glob.

    ``attribute`` is a path relative to a device directory (``ports/1/state``,
    components may be globs: every match must pass); ``subsystem`` picks the
    nearest ancestor of that subsystem, else the first device from the unit's
    own upwards that has the attribute is read. ``expect`` is an fnmatch
    pattern on the value with surrounding whitespace stripped.
    """

    attribute: str
    expect: str
    subsystem: str | None = None
    timeout: float = 3.0  # for one round of reads; a stuck read fails its units


@dataclass(frozen=True)
class HealthCheck:
    """A probe run per unit every ``interval`` seconds: a command (``exec``) or
    a sysfs attribute read in-process (``sysfs``); exactly one is set.

    A unit turns Unhealthy after ``failure_threshold`` consecutive failures
    (non-zero exit, wrong value or timeout) and Healthy again after one success.
    """

    exec: Exec | None
    interval: float = 10.0
    failure_threshold: int = 3
    sysfs: SysfsProbe | None = None

    @property
    def timeout(self) -> float:
        if self.sysfs is not None:
            return self.sysfs.timeout
        return self.exec.timeout if self.exec is not None else 0.0


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
class ExtraDevice:
    """Device nodes given with every allocation besides the unit's own
    (``allocate.devices``): a control node such as ``/dev/nvidiactl``.

    ``path`` is an absolute path or glob under /dev; ``container_path`` a
    template per matched node (``device``), by default the matched path. A
    required entry (``optional`` false) that matches no device node makes every
    unit of the resource Unhealthy until one appears.
    """

    path: str
    permissions: str = "rw"
    container_path: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class AllocateSpec:
    """What a container receives, as template sources."""

    env: Mapping[str, str] = field(default_factory=frozen_map)
    mounts: tuple[MountTemplate, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    cdi: bool = False  # also publish a CDI spec and return CDI names (allocation.cdi)
    devices: tuple[ExtraDevice, ...] = ()


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
    count: int = 1  # 1 with ``unbounded``
    # ``count: unbounded``: any number of containers share a unit; the kubelet
    # sees ``free_ids`` free IDs per unit at a time (deviceplugin/sharing.py).
    unbounded: bool = False
    free_ids: int = DEFAULT_FREE_IDS
    permissions: str = "rw"
    health: HealthCheck | None = None
    hooks: Hooks = field(default_factory=Hooks)
    allocate: AllocateSpec = field(default_factory=AllocateSpec)
    preferred_allocation: PreferredAllocation = PreferredAllocation.PACKED
    dra: DraSpec = field(default_factory=DraSpec)
    source: Source = field(default=Source("<memory>"), compare=False)
    # Built once at load time from ``allocate``; derived, so not compared.
    templates: CompiledTemplates | None = field(default=None, compare=False, repr=False)

    @property
    def id_slots(self) -> int:
        """How many replica IDs a unit may have at most (room unit IDs leave for suffixes)."""
        return UNBOUNDED_INDEX_LIMIT if self.unbounded else self.count


@dataclass(frozen=True)
class Config:
    """A whole validated config: every resource of every file."""

    resources: tuple[ResourceDefinition, ...]
    files: tuple[str, ...] = field(default=(), compare=False)

    def by_name(self) -> Mapping[str, ResourceDefinition]:
        return {r.name: r for r in self.resources}
