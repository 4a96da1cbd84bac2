"""Where a container sees a node: the ``containerPath`` template of the matcher
(or ``allocate.devices`` entry) that found it, rendered per node.

What it renders comes partly from the device (a product string), so it is
checked every time and a node whose path breaks a rule is left out with a
warning, never repaired.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import Any

from genericdp.config.devpaths import container_path_problem
from genericdp.config.templates import allocation_budget, compile_node_template
from genericdp.discovery.model import DeviceNode
from genericdp.errors import clip

log = logging.getLogger(__name__)


def node_context(node: DeviceNode) -> dict[str, Any]:
    """What a node's ``containerPath`` template sees as ``device``."""
    return {
        "path": node.container_path,
        "host_path": node.host_path,
        "name": os.path.basename(node.host_path),
        "major": node.major,
        "minor": node.minor,
        "subsystem": node.subsystem,
        "numa_node": node.numa_node,
        "attributes": dict(node.attributes),
        "properties": dict(node.properties),
    }


def with_container_path(node: DeviceNode, source: str | None, *, what: str) -> DeviceNode | None:
    """``node`` seen at its rendered ``source`` (None: as matched); None when
    the rendering fails or breaks a path rule (logged, naming ``what``)."""
    if source is None:
        return node
    try:
        # One node's budget: the template limits' loop count and wall clock apply.
        with allocation_budget():
            rendered = compile_node_template(source).render({"device": node_context(node)})
    except Exception as exc:  # noqa: BLE001 -- whatever a template raises, one unit fails
        log.warning("%s: containerPath of %s failed to render: %s", what, node.host_path, exc)
        return None
    problem = container_path_problem(rendered)
    if problem is not None:
        log.warning(
            "%s: containerPath of %s rendered %s, which %s; node left out",
            what,
            node.host_path,
            clip(repr(rendered)),
            problem,
        )
        return None
    return replace(node, container_path=rendered)
