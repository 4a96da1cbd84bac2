"""Rendering an allocation's templates (compiled and sandboxed at load): the context
they see, each value rendered within the allocation's budget and confined, on the
event loop or off it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, cast

from genericdp.allocation.confine import confine_path
from genericdp.config.model import ResourceDefinition
from genericdp.config.templates import (
    MAX_ALLOCATION_BYTES,
    MAX_VALUE_BYTES,
    TEMPLATE_NAMES,
    SliceSpent,
    TemplateValue,
)
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import TemplateRenderError, UnsafeAllocationError, ellipsized, first_of, shown

# What a render may take on the event loop before it is done again in a worker
# thread: the templates of most allocations take well under a millisecond, and
# the hop to a thread and back cost more than that (docs/contributing/performance.md).
INLINE_RENDER_SECONDS = 0.002

_T = TypeVar("_T")


async def rendered_soon(render: Callable[[float | None], _T]) -> tuple[_T, bool]:
    """``render(INLINE_RENDER_SECONDS)`` on the loop, or, when that slice is too short,
    ``render(None)`` again in a worker thread (rendering is pure), and whether it went to
    a thread (the caller's units may have changed meanwhile)."""
    try:
        return render(INLINE_RENDER_SECONDS), False
    except SliceSpent:
        return await asyncio.to_thread(render, None), True


def _plain(mapping: Mapping[str, str]) -> dict[str, str]:
    """A dict copy (of ``frozen_map``'s proxy: its dict's own copy, five times quicker)."""
    if isinstance(mapping, MappingProxyType):
        return cast("dict[str, str]", mapping.copy())
    return dict(mapping)


def _node_context(node: DeviceNode, unit_id: str) -> dict[str, Any]:
    return {
        "path": node.container_path,
        "host_path": node.host_path,
        "container_path": node.container_path,
        "major": node.major,
        "minor": node.minor,
        "subsystem": node.subsystem,
        "numa_node": node.numa_node,
        "attributes": _plain(node.attributes),
        "properties": _plain(node.properties),
        "unit_id": unit_id,
    }


def template_context(
    definition: ResourceDefinition,
    units: Sequence[Unit],
    node_name: str,
    device_ids: Sequence[str],
    names: Collection[str] = TEMPLATE_NAMES,
) -> dict[str, Any]:
    """Plain dicts, lists and strings: templates never see our dataclasses.
    Only ``names`` (the names the resource's templates read) are built."""
    context: dict[str, Any] = {"resource": definition.name, "node_name": node_name}
    want_units, want_devices = "units" in names, "devices" in names
    if want_units or want_devices:
        unit_dicts = []
        devices: dict[str, dict[str, Any]] = {}
        for unit in units:
            node_dicts = [_node_context(node, unit.id) for node in unit.nodes]
            for node_dict in node_dicts:
                devices.setdefault(node_dict["container_path"], node_dict)
            if want_units:
                unit_dicts.append(
                    {
                        "id": unit.id,
                        "nodes": node_dicts,
                        "numa_node": unit.numa_node,
                        "attributes": _plain(unit.attributes),
                        "properties": _plain(unit.properties),
                    }
                )
        if want_units:
            context["units"] = unit_dicts
        if want_devices:
            context["devices"] = list(devices.values())
    if "device_ids" in names:
        context["device_ids"] = list(device_ids)
    return context


def _render(
    resource: str, section: str, name: str, value: TemplateValue, context: Mapping[str, Any]
) -> str:
    """``value`` rendered; a failure names ``allocate.<section>.<name>`` (built only then)."""
    try:
        return value.render(context)
    except SliceSpent:
        raise  # not an error: the caller renders again, with the whole budget
    # The boundary for everything a template can raise: Jinja's errors, and the
    # TypeError/KeyError/OverflowError/... of the filters and methods it calls.
    except Exception as exc:
        source = ellipsized(value.source, 80, "...")
        raise TemplateRenderError(
            f"resource {resource}: allocate.{section}.{name} {source!r}: {exc}"
        ) from exc


def render_path(
    resource: str,
    section: str,
    name: str,
    value: TemplateValue,
    context: Mapping[str, Any],
    *,
    units: str,
) -> str:
    """A rendered mount path, normalised and confined to its template (``confine``)."""
    what = f"resource {resource}: {units}: allocate.{section}.{name}"
    return confine_path(_render(resource, section, name, value, context), value.source, what=what)


def render_value(
    resource: str, section: str, name: str, value: TemplateValue, context: Mapping[str, Any]
) -> str:
    rendered = _render(resource, section, name, value, context)
    if "\x00" in rendered:  # runtimes cannot pass a NUL on
        raise UnsafeAllocationError(
            f"resource {resource}: allocate.{section}.{name} rendered a value containing NUL:"
            f" {shown(rendered)}"
        )
    # A character is at most 4 bytes: most values need no encoding to be measured.
    if len(rendered) * 4 > MAX_VALUE_BYTES and (size := _utf8(rendered)) > MAX_VALUE_BYTES:
        source = ellipsized(value.source, 80, "...")
        raise TemplateRenderError(
            f"resource {resource}: allocate.{section}.{name} {source!r}: rendered {size} bytes,"
            f" more than the {MAX_VALUE_BYTES} bytes a rendered value may have"
        )
    return rendered


def check_allocation_bytes(
    resource: str,
    units: Sequence[Unit],
    env: Mapping[str, str],
    paths: Sequence[tuple[str, str]],
    annotations: Mapping[str, str],
) -> None:
    """Refuse an allocation whose rendered names and values (``paths``: each mount's
    host and container path) pass ``MAX_ALLOCATION_BYTES`` in UTF-8, naming the key
    at which they do."""
    pairs = [*env.items(), *paths, *annotations.items()]
    if sum(len(a) + len(b) for a, b in pairs) * 4 <= MAX_ALLOCATION_BYTES:
        return  # a character is at most 4 bytes
    keys = [
        *(f"env.{k}" for k in env),
        *(f"mounts[{i}]" for i in range(len(paths))),
        *(f"annotations.{k}" for k in annotations),
    ]
    total = 0
    for key, (a, b) in zip(keys, pairs, strict=True):
        total += _utf8(a) + _utf8(b)
        if total > MAX_ALLOCATION_BYTES:
            raise TemplateRenderError(
                f"resource {resource}: {units_named(units)}: allocate.{key}: the allocation"
                f" renders {total} bytes by here (names included), more than the"
                f" {MAX_ALLOCATION_BYTES} bytes one allocation may render: make the"
                " allocate templates render less"
            )


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def units_named(units: Sequence[Unit]) -> str:
    """``unit X`` / ``units X, Y and 3 more`` for messages (IDs are at most 63 characters)."""
    ids = [u.id for u in units]
    return ("unit " if len(ids) == 1 else "units ") + first_of(ids, 3, empty="none")
