"""A DRA driver on a test's tree (``registry``, ``plugins``, ``cdi`` under ``base``),
serving the fakes' resource, for the tests that run it against the embedded DRA kubelet."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from genericdp.config.model import ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.dra.driver import DraDriver, DriverPaths
from genericdp.hooks import HookRunner
from tests.dra_fakes import DRIVER, NODE, MemoryClaims, RecordedHooks, definition, unit


def driver_paths(base: Path, registry: str = "registry") -> DriverPaths:
    """The driver's directories under ``base``; ``registry`` names the kubelet's."""
    return DriverPaths(base / registry, base / "plugins", base / "cdi")


def new_driver(
    base: Path,
    claims: MemoryClaims,
    *,
    resource: ResourceDefinition | None = None,
    units: Sequence[Unit] = (),
    run_hook: HookRunner | None = None,
    registry: str = "registry",
    **options: Any,
) -> DraDriver:
    """A driver of ``resource`` (the fakes' serial resource) with ``units`` (A0 and A1),
    not started; ``options`` are the rest of ``DraDriver``'s (``heartbeat``, ``pod_uid``)."""
    made = DraDriver(
        driver=DRIVER,
        node_name=NODE,
        paths=driver_paths(base, registry),
        claims=claims,
        run_hook=run_hook or RecordedHooks(),
        **options,
    )
    served = resource or definition()
    made.inventory.set_resource(served, list(units) or [unit(0), unit(1)])
    made.preparer.configured = frozenset({served.name})
    return made


@asynccontextmanager
async def started(driver: DraDriver) -> AsyncIterator[DraDriver]:
    """``driver`` started; closed after."""
    await driver.start()
    try:
        yield driver
    finally:
        await driver.close()
