"""One DeviceClass per resource (``genericdp deviceclasses``), pure.

Each class selects this driver's devices of one resource by CEL, on the
``resource`` attribute every published device carries (dra/slices.py), and
names the resource as its ``extendedResourceName`` (KEP-5004, beta in 1.36),
so a pod asking for ``example.com/serial: 1`` in its limits is served by
DRA with its spec unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from genericdp.config.model import Config
from genericdp.dra.slices import API_VERSION, check_resource
from genericdp.k8snames import is_dns1123_subdomain

_NOT_SUBDOMAIN = re.compile(r"[^a-z0-9.-]+")
_RUNS = re.compile(r"-{2,}|\.{2,}|-\.|\.-")
NAME_MAX = 253


def class_name(resource: str) -> str:
    """``example.com/serial`` -> ``serial.example.com`` (a DNS subdomain, stable)."""
    prefix, _, short = resource.rpartition("/")
    plain = f"{short}.{prefix}" if prefix else short
    name = _RUNS.sub("-", _NOT_SUBDOMAIN.sub("-", plain.lower())).strip("-.")
    if name == plain and is_dns1123_subdomain(name):
        return name
    digest = hashlib.sha256(resource.encode()).hexdigest()[:8]
    head = name[: NAME_MAX - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}" if head else digest


def selector(driver: str, resource: str) -> str:
    """The CEL expression matching ``driver``'s devices of ``resource``."""
    quoted_driver, quoted_resource = json.dumps(driver), json.dumps(resource)
    return (
        f"device.driver == {quoted_driver} && "
        f"device.attributes[{quoted_driver}].resource == {quoted_resource}"
    )


def device_class(resource: str, driver: str) -> dict[str, Any]:
    check_resource(resource)
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {
            "name": class_name(resource),
            "labels": {"app.kubernetes.io/managed-by": "genericdp"},
        },
        "spec": {
            "selectors": [{"cel": {"expression": selector(driver, resource)}}],
            "extendedResourceName": resource,
        },
    }


def device_classes(config: Config, driver: str) -> list[dict[str, Any]]:
    """The DeviceClass of each resource of ``config``, in config order."""
    return [device_class(r.name, driver) for r in config.resources]
