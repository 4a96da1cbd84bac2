"""The options a resource's device plugin registers with, and when they change."""

from __future__ import annotations

from genericdp.config.model import PreferredAllocation, ResourceDefinition
from genericdp.kubelet.options import PluginOptions


def plugin_options(definition: ResourceDefinition) -> PluginOptions:
    return PluginOptions(
        pre_start_required=definition.hooks.pre_start is not None,
        get_preferred_allocation_available=(
            definition.preferred_allocation is not PreferredAllocation.NONE
        ),
    )


def renews(before: ResourceDefinition, after: ResourceDefinition) -> bool:
    """Whether the change needs a new socket: the kubelet reads options only
    during Register (a preStart hook added or removed, the preferred-allocation
    policy to or from ``none``), and a fresh endpoint is how it hears them anew."""
    return plugin_options(before) != plugin_options(after)
