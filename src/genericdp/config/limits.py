"""What one node may cost: the limits on resources, units and device IDs, in one place.

Each limit is what the DaemonSet's memory limit (256 MiB) holds, a reload to a config
of the same size included (``bench/costs.py``). One resource may take half of the units
and IDs, so a runaway glob leaves room for the node's other resources. How many units
discovery finds is known only on the node, which serves the first ones in ID order up
to the limits (``runtime/budget.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from genericdp.config.semantic import resources_of
from genericdp.config.v1.resource import DEFAULT_FREE_IDS, UNBOUNDED
from genericdp.config.yamlpos import Document
from genericdp.errors import ConfigIssue

MEMORY_LIMIT_MIB = 256  # the DaemonSet's (deploy/ and the chart's values)
MAX_RESOURCES = 400  # all files together
MAX_UNITS_PER_NODE = 10_000
MAX_UNITS_PER_RESOURCE = MAX_UNITS_PER_NODE // 2
MAX_IDS_PER_NODE = 100_000  # units times count (freeIds for count: unbounded)
MAX_IDS_PER_RESOURCE = MAX_IDS_PER_NODE // 2


def too_many_resources(docs: Sequence[Document]) -> list[ConfigIssue]:
    """More resources, across all files, than the memory limit holds: said at the first one over."""
    found = [(doc, path) for doc in docs for path, _resource in resources_of(doc)]
    if len(found) <= MAX_RESOURCES:
        return []
    doc, path = found[MAX_RESOURCES]
    message = (
        f"the config defines {len(found)} resources, more than the {MAX_RESOURCES} the"
        f" daemon's memory limit ({MEMORY_LIMIT_MIB} MiB) can serve; this is resource"
        f" {MAX_RESOURCES + 1}. Split the nodes across configs (one DaemonSet per node"
        " group), or serve related devices as one resource"
    )
    return [doc.issue(path, message)]


def ids_per_unit(resource: dict[str, object]) -> int:
    """The device IDs one unit of ``resource`` lists (0 when the schema refuses it)."""
    count = resource.get("count", 1)
    if count == UNBOUNDED:
        count = resource.get("freeIds", DEFAULT_FREE_IDS)
    if isinstance(count, bool) or not isinstance(count, int):
        return 0
    return max(count, 0)


def too_many_ids(docs: Sequence[Document]) -> list[ConfigIssue]:
    """More device IDs than a node may list with one unit per resource: said at the
    resource that passes the limit."""
    found = [(doc, path, r) for doc in docs for path, r in resources_of(doc)]
    total = 0
    for doc, path, resource in found:
        total += ids_per_unit(resource)
        if total > MAX_IDS_PER_NODE:
            whole = sum(ids_per_unit(r) for _, _, r in found)
            key = "freeIds" if resource.get("count") == UNBOUNDED else "count"
            where = (*path, key) if key in resource else path
            message = (
                f"the config's resources list {whole} device IDs with a single unit each"
                f" (count, or freeIds when unbounded, added up), more than the"
                f" {MAX_IDS_PER_NODE} a node may list within the daemon's memory limit"
                f" ({MEMORY_LIMIT_MIB} MiB); this resource passes it. Lower count, or"
                " split the nodes across configs"
            )
            return [doc.issue(where, message)]
    return []
