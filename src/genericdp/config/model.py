"""The frozen, validated form of a config v1 file, under the names the rest of
the tree imports.

Built once by ``genericdp.config.load``; nothing downstream sees raw YAML.
Equality of two ``ResourceDefinition`` values means "nothing to do" for the
reconciler, so compiled templates are excluded from comparison.
"""

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
