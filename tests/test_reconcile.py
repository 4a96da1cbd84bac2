"""Reconcile plan: unchanged untouched, in-place updates, re-registration, stop before start."""

from __future__ import annotations

from dataclasses import replace

from genericdp.config.model import (
    Exec,
    GlobMatcher,
    HealthCheck,
    Hooks,
    PreferredAllocation,
    ResourceDefinition,
    Source,
)
from genericdp.deviceplugin.options import plugin_options, renews
from genericdp.runtime.reconcile import plan

SERIAL = ResourceDefinition(name="example.com/serial", match=(GlobMatcher("/dev/ttyUSB*"),))
AUDIO = ResourceDefinition(name="example.com/audio", match=(GlobMatcher("/dev/snd/*"),))
HOOK = Exec(argv=("/bin/true",), timeout=5.0)


def test_identical_config_is_untouched() -> None:
    """Equal definitions (even from another file) produce an empty plan."""
    moved = replace(SERIAL, source=Source("other.yaml", 3))
    steps = plan([SERIAL, AUDIO], [moved, AUDIO], renews)
    assert steps.empty
    assert steps.unchanged == ("example.com/audio", "example.com/serial")


def test_detail_changes_update_in_place() -> None:
    """Matchers, count and health changes keep the plugin and update it in place."""
    changed = replace(
        SERIAL,
        match=(GlobMatcher("/dev/ttyACM*"),),
        count=4,
        health=HealthCheck(exec=HOOK),
        hooks=Hooks(init=HOOK),
    )
    steps = plan([SERIAL, AUDIO], [changed, AUDIO], renews)
    assert steps.update == (changed,)
    assert steps.renew == steps.start == ()
    assert steps.stop == ()


def test_option_changes_reregister() -> None:
    """Adding a preStart hook or switching policy to none re-registers."""
    pre = replace(SERIAL, hooks=Hooks(pre_start=HOOK))
    none = replace(AUDIO, preferred_allocation=PreferredAllocation.NONE)
    steps = plan([SERIAL, AUDIO], [pre, none], renews)
    assert {d.name for d in steps.renew} == {SERIAL.name, AUDIO.name}
    assert not steps.update


def test_packed_to_spread_is_in_place() -> None:
    """packed -> spread keeps GetPreferredAllocation advertised: no re-registration."""
    spread = replace(SERIAL, preferred_allocation=PreferredAllocation.SPREAD)
    steps = plan([SERIAL], [spread], renews)
    assert steps.update == (spread,)


def test_removed_stop_and_new_start() -> None:
    """Removed resources are stopped and new ones started (a rename is both)."""
    renamed = replace(SERIAL, name="example.com/uart")
    steps = plan([SERIAL, AUDIO], [renamed, AUDIO], renews)
    assert steps.stop == ("example.com/serial",)
    assert steps.start == (renamed,)
    assert str(steps) == "stop example.com/serial; start example.com/uart"


def test_plugin_options_follow_definition() -> None:
    """Options: preStart hook -> pre_start_required; policy none -> no preferred allocation."""
    assert plugin_options(SERIAL).get_preferred_allocation_available
    assert not plugin_options(SERIAL).pre_start_required
    opts = plugin_options(
        replace(SERIAL, hooks=Hooks(pre_start=HOOK), preferred_allocation=PreferredAllocation.NONE)
    )
    assert opts.pre_start_required
    assert not opts.get_preferred_allocation_available
