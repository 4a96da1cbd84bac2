"""What discovery produces: device nodes and the units a backend hands out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from genericdp.config.model import frozen_map

MAX_ID_LENGTH = 63  # the kubelet's limit on Device.ID; unit IDs keep room for replica suffixes


@dataclass(frozen=True)
class DeviceNode:
    """One device node: ``host_path`` is the real node (symlinks resolved) spelled
    ``/dev/...`` whatever the dev root we read it through; ``container_path`` is where
    the container sees it (the path that matched, link or not)."""

    host_path: str
    container_path: str
    major: int | None = None
    minor: int | None = None
    subsystem: str | None = None
    sysfs_path: str | None = None  # canonical, relative to the sys root
    # Attributes of the node itself (sysfs files); ancestors' are not copied here.
    attributes: Mapping[str, str] = field(default_factory=frozen_map)
    # udev database properties (``E:`` lines of /run/udev/data/c<maj>:<min>).
    properties: Mapping[str, str] = field(default_factory=frozen_map)
    numa_node: int | None = None
    # Device cgroup permissions of an ``allocate.devices`` node; None: the resource's.
    permissions: str | None = None
    # The host node's permission bits and owner: a chmod or chown on the host
    # makes the node, and so its unit, compare unequal, and the CDI spec follows.
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class Unit:
    """What the kubelet counts: one node, or several nodes that belong together. ``id`` is
    stable across restarts and rescans. ``attributes`` and ``properties`` are those of its
    group parent, else of its first node. ``shared`` are the resource's ``allocate.devices``
    nodes; ``missing`` the required entries that matched none (the unit is Unhealthy)."""

    id: str
    nodes: tuple[DeviceNode, ...]
    numa_node: int | None = None
    parent: str | None = None  # sysfs path of the grouping/common parent, if known
    attributes: Mapping[str, str] = field(default_factory=frozen_map)
    properties: Mapping[str, str] = field(default_factory=frozen_map)
    shared: tuple[DeviceNode, ...] = ()
    missing: tuple[str, ...] = ()
    # The PCI function every node is (``0000:3b:00.0``) and the PCIe root
    # every node sits under (``pci0000:00``), when sysfs says so (discovery/pci.py).
    pci_bus_id: str | None = None
    pcie_root: str | None = None


@dataclass(frozen=True)
class Roots:
    """Where the host's trees are visible to us (tests point these at temporary trees)."""

    dev: Path = Path("/dev")
    sys: Path = Path("/sys")
    udev: Path = Path("/run/udev")  # the udev database lives in ``<udev>/data``
