"""One DeviceClass per resource (``genericdp deviceclasses``), pure.

Each selects this driver's devices of one resource by CEL on the ``resource`` attribute
every published device carries (kubeletplugin/slices.py), and names the resource as its
``extendedResourceName`` (KEP-5004, beta in 1.36): a pod asking for
``example.com/serial: 1`` in its limits is served by DRA with its spec unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from genericdp.config.model import Config
from genericdp.config.names import device_class_collision, device_class_name
from genericdp.errors import GenericdpError
from genericdp.kubeletplugin.slices import API_VERSION, check_resource

MANAGED_BY = "app.kubernetes.io/managed-by"
DRIVER_LABEL = "genericdp.io/driver"


def owner_labels(driver: str) -> dict[str, str]:
    """The labels every class we make carries: what ``reconcile-classes`` owns."""
    return {MANAGED_BY: "genericdp", DRIVER_LABEL: driver}


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
        "metadata": {"name": device_class_name(resource), "labels": owner_labels(driver)},
        "spec": {
            "selectors": [{"cel": {"expression": selector(driver, resource)}}],
            "extendedResourceName": resource,
        },
    }


class DeviceClassError(GenericdpError):
    """Two resources of a config derive the same DeviceClass name."""


def device_classes(config: Config, driver: str) -> list[dict[str, Any]]:
    """The DeviceClass of each resource of ``config``, in config order; DeviceClassError
    when two derive one name (``validate`` refuses such a config too)."""
    seen: dict[str, str] = {}
    for resource in config.resources:
        other = seen.setdefault(device_class_name(resource.name), resource.name)
        if other != resource.name:
            raise DeviceClassError(device_class_collision(resource.name, other))
    return [device_class(r.name, driver) for r in config.resources]
