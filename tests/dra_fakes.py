"""Shared pieces of the DRA backend tests: definitions, units, claims, a hook recorder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from genericdp.config.model import (
    AllocateSpec,
    Exec,
    GlobMatcher,
    HealthCheck,
    Hooks,
    MountTemplate,
    ResourceDefinition,
    frozen_map,
)
from genericdp.config.templates import compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.dra.checkpoint import Checkpoint
from genericdp.dra.claims import AllocatedDevice, ClaimRef
from genericdp.dra.inventory import Inventory
from genericdp.dra.memclaims import MemoryClaims
from genericdp.dra.naming import device_name
from genericdp.dra.prepare import Preparer
from genericdp.errors import HookError
from genericdp.hooks import HookRun

NODE = "node-a"
DRIVER = "genericdp.io"
SERIAL = "example.com/serial"
HOOK = Exec(("/bin/true",), 5.0)


def unit(n: int) -> Unit:
    return Unit(f"A{n}", (DeviceNode(f"/dev/ttyUSB{n}", f"/dev/serial/by-id/usb-A{n}"),))


def definition(
    name: str = SERIAL,
    *,
    hooks: Hooks | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[MountTemplate] = (),
    health: HealthCheck | None = None,
) -> ResourceDefinition:
    allocate = AllocateSpec(frozen_map(env), tuple(mounts))
    return ResourceDefinition(
        name=name,
        match=(GlobMatcher("/dev/ttyUSB*"),),
        hooks=hooks or Hooks(),
        allocate=allocate,
        health=health,
        templates=compile_templates(allocate),
    )


def claim(n: int = 1) -> ClaimRef:
    return ClaimRef("default", f"claim-{n}", f"0000000{n}-aaaa-bbbb-cccc-dddddddddddd")


def allocated(resource: str, *units: Unit, pool: str = NODE) -> list[AllocatedDevice]:
    return [AllocatedDevice("req", pool, device_name(resource, u.id)) for u in units]


@dataclass
class RecordedHooks:
    """A HookRunner recording (hook, resource, units, device IDs); fails the hooks in ``fail``."""

    runs: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)

    async def __call__(self, hook: HookRun) -> object:
        self.runs.append(
            (hook.name, hook.resource, tuple(u.id for u in hook.units), tuple(hook.device_ids))
        )
        if hook.name in self.fail:
            raise HookError(f"{hook.name} hook failed on purpose")
        return None

    def names(self) -> list[str]:
        return [run[0] for run in self.runs]


@dataclass
class Setup:
    inventory: Inventory
    claims: MemoryClaims
    checkpoint: Checkpoint
    hooks: RecordedHooks
    preparer: Preparer
    cdi_dir: Path


def setup(
    base: Path,
    definitions: Sequence[tuple[ResourceDefinition, Sequence[Unit]]],
    *,
    hooks: RecordedHooks | None = None,
) -> Setup:
    inventory = Inventory(NODE)
    for d, units in definitions:
        inventory.set_resource(d, units)
    claims = MemoryClaims()
    checkpoint = Checkpoint(base / "plugin" / "checkpoint.json")
    checkpoint.load()
    hooks = hooks or RecordedHooks()
    cdi_dir = base / "cdi"
    preparer = Preparer(
        driver=DRIVER,
        inventory=inventory,
        claims=claims,
        checkpoint=checkpoint,
        cdi_dir=cdi_dir,
        run_hook=hooks,
        node_name=NODE,
    )
    return Setup(inventory, claims, checkpoint, hooks, preparer, cdi_dir)
