"""The frozen config model under the names the rest of the tree imports; nothing
downstream sees raw YAML. Equal ``ResourceDefinition`` values mean "nothing to do"
to the reconciler (compiled templates are not compared)."""

from __future__ import annotations

from genericdp.config.v1.allocate import AllocateSpec, ExtraDevice, MountTemplate, NodeOwnership
from genericdp.config.v1.common import Exec, frozen_map
from genericdp.config.v1.dra import AttributeValue, Version
from genericdp.config.v1.grouping import GroupBy
from genericdp.config.v1.health import HealthCheck, SysfsProbe
from genericdp.config.v1.hooks import Hooks
from genericdp.config.v1.matchers import GlobMatcher, Matcher, UdevMatcher
from genericdp.config.v1.resource import (
    UNBOUNDED,
    UNBOUNDED_INDEX_LIMIT,
    Config,
    PreferredAllocation,
    ResourceDefinition,
    Source,
)

__all__ = [
    "UNBOUNDED",
    "UNBOUNDED_INDEX_LIMIT",
    "AllocateSpec",
    "AttributeValue",
    "Config",
    "Exec",
    "ExtraDevice",
    "GlobMatcher",
    "GroupBy",
    "HealthCheck",
    "Hooks",
    "Matcher",
    "MountTemplate",
    "NodeOwnership",
    "PreferredAllocation",
    "ResourceDefinition",
    "Source",
    "SysfsProbe",
    "UdevMatcher",
    "Version",
    "frozen_map",
]
