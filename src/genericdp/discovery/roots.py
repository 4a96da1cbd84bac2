"""Roots a resource needs and this host lacks: a ``udev:`` matcher reads sysfs,
a ``properties:`` filter the udev database. Without them discovery finds
nothing, so ``discover`` and ``/readyz`` say why instead of a quiet "no devices".
"""

from __future__ import annotations

from collections.abc import Iterable

from genericdp.config.model import ResourceDefinition, UdevMatcher
from genericdp.discovery.model import Roots


def missing_roots(definition: ResourceDefinition, roots: Roots) -> tuple[str, ...]:
    """What ``definition``'s matchers need that ``roots`` do not have, in words."""
    udev = [m for m in definition.match if isinstance(m, UdevMatcher)]
    problems = []
    if udev and not roots.sys.is_dir():
        problems.append(
            f"sysfs root {roots.sys} does not exist, so its udev: matchers find nothing"
            " (--sys-root or GENERICDP_SYS_ROOT: where the host's /sys is visible)"
        )
    data = roots.udev / "data"
    if any(m.properties for m in udev) and not data.is_dir():
        problems.append(
            f"udev database {data} does not exist, so its properties: filters match nothing"
            " (--udev-root or GENERICDP_UDEV_ROOT: where the host's /run/udev is visible;"
            " a host without systemd-udevd has none: match on attributes instead)"
        )
    return tuple(problems)


def root_notes(definitions: Iterable[ResourceDefinition], roots: Roots) -> list[str]:
    """``name: problem`` for every resource and root it lacks (``/readyz`` lines)."""
    return [f"{d.name}: {p}" for d in definitions for p in missing_roots(d, roots)]
