"""What the node publishes: its units as ``resource.k8s.io/v1`` ResourceSlices (pure).

One pool per node, named for it; each resource's devices go into slices of their own
(docs/dra.md, Slices). A device is one unit, named ``device_name(resource, unit.id)``, with
typed attributes in the driver's domain (``device.attributes["<driver>"].serial`` in CEL) and
the standard ``resource.kubernetes.io/`` ``numaNode``, ``pciBusID`` and ``pcieRoot`` where
sysfs knows them (``standard_attributes``).

The API server's limits (v1 validation, checked against 1.36 in
tests/test_dra_standard_attributes.py): 128 devices per slice, 64 when any has taints; 32
attributes and capacities per device; attribute names C identifiers of at most 32 characters,
with an optional DNS-subdomain domain; string and version values at most 64 bytes, versions
semver 2.0. A value discovery found that does not fit is left out (it would make the whole
slice invalid).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from genericdp.config.model import AttributeValue, ResourceDefinition, Version
from genericdp.config.v1.dra import DEFAULT_TAINT_EFFECT, STANDARD_ATTRIBUTES
from genericdp.discovery.model import Unit
from genericdp.errors import GenericdpError
from genericdp.kubeletplugin.naming import device_name

API_VERSION = "resource.k8s.io/v1"
# 128 per slice, but 64 once a device has taints; unhealthy devices have one,
# and a slice's size must not depend on health, so always 64.
MAX_DEVICES_PER_SLICE = 64
MAX_ATTRIBUTES = 32
MAX_VALUE_BYTES = 64
SLICE_NAME_MAX = 253
# The API server appends 5 characters to a generateName cut to 58 (names.SimpleNameGenerator).
GENERATED_PREFIX_MAX = 58
# Each slice's key: which resource and index of which node and driver it holds (the
# publisher finds its slices by it, as the API server names them: publisher.py).
SLICE_LABEL = "genericdp.io/slice"
UNHEALTHY_TAINT_KEY = "unhealthy"  # qualified with the driver: <driver>/unhealthy
# The Kubernetes standard attributes (k8s.io/dynamic-resource-allocation/deviceattribute).
STANDARD_NUMA_NODE, STANDARD_PCI_BUS_ID, STANDARD_PCIE_ROOT = STANDARD_ATTRIBUTES
MAX_NUMA_NODES = 1024  # the helpers' maxNUMANodes (the kernel's maximum)
# A shared device's capacity (``count: N``): N shares, one per allocation unless it asks more.
SHARES_CAPACITY = "shares"

_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_NOT_SUBDOMAIN = re.compile(r"[^a-z0-9.-]+")
_RUNS = re.compile(r"-{2,}|\.{2,}|-\.|\.-")

Attribute = dict[str, Any]  # {"string": ...} | {"int": ...} | {"bool": ...} | {"version": ...}


class SliceError(GenericdpError):
    """A resource that cannot be published as DRA devices (the message says which and why)."""


def _string(value: str | None) -> Attribute | None:
    if value is None or value == "" or len(value.encode()) > MAX_VALUE_BYTES:
        return None
    return {"string": value}


def _hex_id(value: str | None) -> str | None:
    """``0x8086`` (sysfs) and ``8086`` (udev) both as ``8086``."""
    return None if value is None else value.strip().lower().removeprefix("0x")


def _pci_address(unit: Unit) -> str | None:
    for node in unit.nodes:
        if found := _PCI_ADDRESS.findall(node.sysfs_path or ""):
            return str(found[-1])
    return None


def discovered_attributes(unit: Unit) -> dict[str, Attribute]:
    """What discovery knows about ``unit``, as typed attributes (missing ones left out)."""
    props, attrs = unit.properties, unit.attributes
    first = unit.nodes[0] if unit.nodes else None
    found: dict[str, Attribute | None] = {
        "vendor": _string(_hex_id(props.get("ID_VENDOR_ID") or attrs.get("vendor"))),
        "product": _string(
            _hex_id(props.get("ID_MODEL_ID") or attrs.get("device") or attrs.get("idProduct"))
        ),
        "serial": _string(props.get("ID_SERIAL_SHORT") or attrs.get("serial")),
        "driver": _string(props.get("ID_USB_DRIVER") or props.get("DRIVER")),
        "subsystem": _string(first.subsystem if first is not None else None),
        "pciAddress": _string(_pci_address(unit)),
        "numaNode": None if unit.numa_node is None else {"int": unit.numa_node},
    }
    return {name: value for name, value in found.items() if value is not None}


def standard_attributes(unit: Unit) -> dict[str, Attribute]:
    """The standard attributes sysfs knows, as the ``deviceattribute`` helpers publish them:
    ``numaNode`` of a real node (-1 would match every device without one), ``pciBusID`` of a
    PCI function, ``pcieRoot`` of a unit under one (discovery/pci.py)."""
    found: dict[str, Attribute] = {}
    if unit.numa_node is not None and 0 <= unit.numa_node < MAX_NUMA_NODES:
        found[STANDARD_NUMA_NODE] = {"int": unit.numa_node}
    if unit.pci_bus_id is not None:
        found[STANDARD_PCI_BUS_ID] = {"string": unit.pci_bus_id}
    if (root := _string(unit.pcie_root)) is not None:
        found[STANDARD_PCIE_ROOT] = root
    return found


@dataclass(frozen=True)
class DeviceOptions:
    """How a resource's devices are published. ``shares``: allocations a device takes at once
    (``count``; None: unbounded); ``sharing`` False: one allocation at a time (an API server
    without consumable capacity, docs/dra.md)."""

    attributes: Mapping[str, AttributeValue] = field(default_factory=lambda: MappingProxyType({}))
    shares: int | None = 1
    taint_effect: str = DEFAULT_TAINT_EFFECT
    sharing: bool = True

    @classmethod
    def of(cls, definition: ResourceDefinition) -> DeviceOptions:
        return cls(
            attributes=definition.dra.attributes,
            shares=None if definition.unbounded else definition.count,
            taint_effect=definition.dra.taint_effect,
        )


DEFAULT_OPTIONS = DeviceOptions()


def shaped(entry: dict[str, Any], options: DeviceOptions) -> dict[str, Any]:
    """``entry`` shared as ``options`` say (KEP-5075), its taint with their effect.

    ``count: N``: a capacity of N shares, of which an allocation asking for nothing (as the
    scheduler's claims for ``limits`` do: one per unit of the limit) consumes one.
    ``count: unbounded``: no capacity, so nothing limits how many claims share the device.
    """
    if options.sharing and options.shares != 1:  # several claims may hold a device
        entry["allowMultipleAllocations"] = True
        if options.shares is not None:
            shares = str(options.shares)
            entry["capacity"] = {
                SHARES_CAPACITY: {
                    "value": shares,
                    "requestPolicy": {
                        "default": "1",
                        "validRange": {"min": "1", "max": shares, "step": "1"},
                    },
                }
            }
    for taint in entry.get("taints") or ():
        taint["effect"] = options.taint_effect
    return entry


def dropped(field: str, wanted: Mapping[str, Any], written: Mapping[str, Any]) -> bool:
    """Whether the server dropped ``field`` of a device of slice spec ``wanted`` in what it
    stored (``written``): an API server drops the fields of a feature gate that is off
    (``allowMultipleAllocations``: DRAConsumableCapacity, off by default before 1.36;
    ``taints``: DRADeviceTaints, and the device is then allocatable, its being unhealthy
    unsaid)."""
    kept = {d.get("name"): d for d in written.get("devices") or []}
    return any(
        d.get(field) and not kept.get(d.get("name"), {}).get(field)
        for d in wanted.get("devices") or []
    )


def unshared(found: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``found`` devices as an API server without consumable capacity stores them."""
    out = []
    for entry in found:
        item = {k: v for k, v in entry.items() if k != "allowMultipleAllocations"}
        capacity = dict(item.pop("capacity", None) or {})
        capacity.pop(SHARES_CAPACITY, None)
        if capacity:
            item["capacity"] = capacity
        out.append(item)
    return out


def typed(value: AttributeValue) -> Attribute | None:
    """A config attribute value as the API's typed value (None when it cannot be one)."""
    if isinstance(value, Version):
        return None if len(value.version.encode()) > MAX_VALUE_BYTES else {"version": value.version}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return _string(value)


def device(
    resource: str,
    unit: Unit,
    *,
    healthy: bool,
    driver: str,
    own: Mapping[str, AttributeValue] | None = None,
) -> dict[str, Any]:
    """One device of a slice; unhealthy ones carry a NoSchedule taint. ``own``
    (``dra.attributes``) win over discovered attributes, never over the fixed ones."""
    attributes: dict[str, Attribute] = {
        "resource": {"string": resource},
        "unitID": {"string": unit.id},
        "healthy": {"bool": healthy},
        "nodes": {"int": len(unit.nodes)},
        **standard_attributes(unit),
    }
    found = discovered_attributes(unit)
    for name, given in (own or {}).items():
        if (made := typed(given)) is not None:
            found[name] = made
    for name, value in found.items():
        attributes.setdefault(name, value)
    entry: dict[str, Any] = {
        "name": device_name(resource, unit.id),
        "attributes": dict(list(attributes.items())[:MAX_ATTRIBUTES]),
    }
    if not healthy:
        entry["taints"] = [
            {"key": f"{driver}/{UNHEALTHY_TAINT_KEY}", "value": "true", "effect": "NoSchedule"}
        ]
    return entry


def check_resource(resource: str) -> None:
    """Raise SliceError when ``resource`` cannot be a string attribute (classes select on it)."""
    if len(resource.encode()) > MAX_VALUE_BYTES:
        raise SliceError(
            f"resource {resource!r}: its name is {len(resource.encode())} bytes; DRA publishes it "
            f"as the device attribute 'resource', which holds at most {MAX_VALUE_BYTES}"
        )


def devices(
    resource: str,
    units: Iterable[Unit],
    unhealthy: AbstractSet[str],
    *,
    driver: str,
    options: DeviceOptions = DEFAULT_OPTIONS,
) -> list[dict[str, Any]]:
    """The devices of ``resource``, ordered by name (two units never share one)."""
    check_resource(resource)
    own = options.attributes
    made = [
        shaped(device(resource, u, healthy=u.id not in unhealthy, driver=driver, own=own), options)
        for u in units
    ]
    made.sort(key=lambda entry: str(entry["name"]))
    return made


def slice_name(node: str, driver: str, resource: str, index: int) -> str:
    """A stable DNS subdomain for slice ``index`` of ``resource`` on ``node``: its key
    (``slice_key``) and the prefix of its server-given name. The readable part always ends in
    ``-`` and a hash of the exact four, as valid names share it (``a.com/x.y``, ``a.com.x/y``).
    """
    plain = f"{node}.{driver}.{resource.replace('/', '.')}.{index}"
    name = _RUNS.sub("-", _NOT_SUBDOMAIN.sub("-", plain.lower())).strip("-.")
    digest = hashlib.sha256(f"{node}\0{driver}\0{resource}\0{index}".encode()).hexdigest()[:8]
    head = name[: SLICE_NAME_MAX - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}" if head else digest


def slice_key(name: str) -> str:
    """The label value that stands for the slice ``slice_name`` derives (63 chars at most)."""
    return hashlib.sha256(name.encode()).hexdigest()[:20]


def pool_slices(
    by_resource: Mapping[str, Sequence[dict[str, Any]]], *, node: str, driver: str, generation: int
) -> dict[str, dict[str, Any]]:
    """The node's whole pool by key. A resource with no devices still gets one (empty)
    slice: the pool says it is served here with nothing available."""
    chunks: list[tuple[str, list[dict[str, Any]]]] = []
    for resource in sorted(by_resource):
        found = list(by_resource[resource])
        parts = [
            found[i : i + MAX_DEVICES_PER_SLICE]
            for i in range(0, max(len(found), 1), MAX_DEVICES_PER_SLICE)
        ]
        chunks.extend(
            (slice_name(node, driver, resource, index), part) for index, part in enumerate(parts)
        )
    return {
        slice_key(name): {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": name[: GENERATED_PREFIX_MAX - 1].rstrip("-.") + "-",
                "labels": {SLICE_LABEL: slice_key(name)},
            },
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": part,
            },
        }
        for name, part in chunks
    }


def comparable(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A slice's spec without the pool's generation and taints' ``timeAdded``, empty
    ``devices`` as none (the server omits an empty list)."""
    pool = {k: v for k, v in dict(spec.get("pool") or {}).items() if k != "generation"}
    found = []
    for entry in spec.get("devices") or []:
        item = dict(entry)
        if "taints" in item:
            item["taints"] = [
                {k: v for k, v in taint.items() if k != "timeAdded"} for taint in item["taints"]
            ]
        found.append(item)
    kept = {k: v for k, v in spec.items() if k not in ("pool", "devices")}
    return {**kept, "pool": pool, "devices": found}
