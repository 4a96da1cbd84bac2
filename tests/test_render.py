"""plan_allocation and compile_templates: context, devices, errors, fast path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from genericdp.allocation.plan import Allocation, DeviceSpec, Mount, plan_allocation
from genericdp.config.model import (
    AllocateSpec,
    GlobMatcher,
    MountTemplate,
    ResourceDefinition,
    frozen_map,
)
from genericdp.config.templates import SliceSpent, compile_templates
from genericdp.discovery.model import DeviceNode, Unit
from genericdp.errors import TemplateRenderError, UnsafeAllocationError

TTY0 = DeviceNode(
    host_path="/dev/ttyUSB0",
    container_path="/dev/serial/by-id/usb-FTDI_A1",
    major=188,
    minor=0,
    subsystem="tty",
    attributes=frozen_map({"dev": "188:0"}),
    properties=frozen_map({"ID_SERIAL_SHORT": "A1"}),
    numa_node=0,
)
TTY1 = DeviceNode("/dev/ttyUSB1", "/dev/ttyUSB1", 188, 1, "tty")
CARD = DeviceNode("/dev/dri/card0", "/dev/dri/card0", 226, 0, "drm", numa_node=1)
RENDER = DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128", 226, 128, "drm", numa_node=1)

DONGLE = Unit(
    "ftdi-A1",
    (TTY0,),
    numa_node=0,
    attributes=frozen_map({"idVendor": "0403", "idProduct": "6001"}),
    properties=frozen_map({"ID_SERIAL": "FTDI_A1"}),
)
PLAIN = Unit("ttyUSB1", (TTY1,))
GPU = Unit(
    "pci-0000_03_00.0", (CARD, RENDER), numa_node=1, attributes=frozen_map({"vendor": "0x8086"})
)


def definition(
    env: Mapping[str, str] | None = None,
    mounts: Sequence[MountTemplate] = (),
    annotations: Mapping[str, str] | None = None,
    *,
    precompile: bool = True,
    permissions: str = "rw",
) -> ResourceDefinition:
    allocate = AllocateSpec(frozen_map(env), tuple(mounts), frozen_map(annotations))
    return ResourceDefinition(
        name="example.com/serial",
        match=(GlobMatcher("/dev/ttyUSB*"),),
        permissions=permissions,
        allocate=allocate,
        templates=compile_templates(allocate) if precompile else None,
    )


def render_env(
    template: str,
    units: Sequence[Unit] = (DONGLE, PLAIN),
    *,
    node_name: str = "",
    device_ids: Sequence[str] = (),
) -> str:
    allocation = plan_allocation(
        definition({"V": template}), units, node_name=node_name, device_ids=device_ids
    ).receives
    return allocation.env["V"]


def test_design_example_lists_container_paths() -> None:
    """The docs/config.md example (SERIAL_PORTS) joins the container path of every node."""
    got = render_env("{{ devices | map(attribute='path') | join(',') }}")
    assert got == "/dev/serial/by-id/usb-FTDI_A1,/dev/ttyUSB1"


def test_device_fields_follow_the_documented_names() -> None:
    """Each device exposes the names of the docs/config.md table."""
    template = (
        "{% for d in devices %}{{ d.unit_id }} {{ d.host_path }} {{ d.container_path }} "
        "{{ d.major }}:{{ d.minor }} {{ d.subsystem }} {{ d.numa_node }} "
        "{{ d.attributes.dev | default('-') }} {{ d.properties.ID_SERIAL_SHORT | default('-') }};"
        "{% endfor %}"
    )
    assert render_env(template) == (
        "ftdi-A1 /dev/ttyUSB0 /dev/serial/by-id/usb-FTDI_A1 188:0 tty 0 188:0 A1;"
        "ttyUSB1 /dev/ttyUSB1 /dev/ttyUSB1 188:1 tty  - -;"
    )


def test_units_expose_id_nodes_numa_attributes_properties() -> None:
    """Units carry id, their nodes, NUMA node, attributes and properties."""
    template = (
        "{% for u in units %}{{ u.id }}/{{ u.nodes | length }}/{{ u.numa_node }}/"
        "{{ u.attributes.idVendor | default('') }}/{{ u.properties.ID_SERIAL | default('') }}"
        "/{{ u.nodes | map(attribute='host_path') | join('+') }} {% endfor %}"
    )
    assert render_env(template, (DONGLE, GPU)) == (
        "ftdi-A1/1/0/0403/FTDI_A1//dev/ttyUSB0 "
        "pci-0000_03_00.0/2/1////dev/dri/card0+/dev/dri/renderD128 "
    )


def test_resource_node_name_and_device_ids_are_passed_through() -> None:
    """resource, node_name and device_ids reach the template."""
    got = render_env(
        "{{ resource }}@{{ node_name }}: {{ device_ids | join(',') }}",
        node_name="worker-1",
        device_ids=["ftdi-A1::0", "ttyUSB1::3"],
    )
    assert got == "example.com/serial@worker-1: ftdi-A1::0,ttyUSB1::3"


def test_devices_are_every_node_in_unit_then_node_order() -> None:
    """DeviceSpecs list every node of every unit in order, with the definition's permissions."""
    allocation = plan_allocation(definition(permissions="r"), [GPU, DONGLE]).receives
    assert allocation.devices == (
        DeviceSpec("/dev/dri/card0", "/dev/dri/card0", "r"),
        DeviceSpec("/dev/dri/renderD128", "/dev/dri/renderD128", "r"),
        DeviceSpec("/dev/serial/by-id/usb-FTDI_A1", "/dev/ttyUSB0", "r"),
    )


def test_devices_are_deduplicated_by_container_path() -> None:
    """A node reached through two units is given (and templated) once."""
    twin = Unit("again", (TTY1, TTY0))
    allocation = plan_allocation(
        definition({"P": "{{ devices | map(attribute='unit_id') | join(',') }}"}),
        [DONGLE, PLAIN, twin],
    ).receives
    assert [d.container_path for d in allocation.devices] == [
        "/dev/serial/by-id/usb-FTDI_A1",
        "/dev/ttyUSB1",
    ]
    assert allocation.env["P"] == "ftdi-A1,ttyUSB1"


def test_mounts_and_annotations_are_rendered() -> None:
    """Mount paths and annotation values are templates too; readOnly is kept."""
    d = definition(
        mounts=[
            MountTemplate("/run/{{ units[0].id }}", "/run/dongle", read_only=True),
            MountTemplate("/var/lib/x", "/data/{{ node_name }}"),
        ],
        annotations={"example.com/units": "{{ units | map(attribute='id') | join(',') }}"},
    )
    allocation = plan_allocation(d, [DONGLE, PLAIN], node_name="n1").receives
    assert allocation.mounts == (
        Mount("/run/dongle", "/run/ftdi-A1", read_only=True),
        Mount("/data/n1", "/var/lib/x", read_only=False),
    )
    assert dict(allocation.annotations) == {"example.com/units": "ftdi-A1,ttyUSB1"}


def test_rendering_is_deterministic() -> None:
    """The same input gives equal allocations (the kubelet replays Allocate)."""
    d = definition(
        {"B": "{{ units[0].attributes | dictsort | map('join', '=') | join(';') }}", "A": "x"},
        annotations={"k": "{{ devices | map(attribute='minor') | join(',') }}"},
    )
    first = plan_allocation(d, [DONGLE, GPU], node_name="n").receives
    second = plan_allocation(d, [DONGLE, GPU], node_name="n").receives
    assert first == second
    assert list(first.env) == ["A", "B"]
    assert first.env["B"] == "idProduct=6001;idVendor=0403"


def test_a_render_past_its_slice_is_given_up_then_done_in_full() -> None:
    """Templates needing more than their slice (on the loop) raise SliceSpent, not a
    render error; the same render without a slice gives the allocation."""
    d = definition({"A": "{{ devices | map(attribute='minor') | join(',') }}", "B": "x"})
    with pytest.raises(SliceSpent):
        plan_allocation(d, [DONGLE, GPU], node_name="n", slice_seconds=-1.0)
    within = plan_allocation(d, [DONGLE, GPU], node_name="n", slice_seconds=60.0).receives
    assert within == plan_allocation(d, [DONGLE, GPU], node_name="n").receives
    assert within.env["A"] == "0,0,128"


def test_no_units_gives_empty_devices_and_renders() -> None:
    """An allocation of nothing renders over empty lists rather than failing."""
    allocation = plan_allocation(definition({"N": "{{ devices | length }}"}), []).receives
    assert allocation == Allocation(env=frozen_map({"N": "0"}))


def test_an_uncompiled_definition_is_refused_clearly() -> None:
    """Templates compile at load only: a definition built without them is an error
    naming the resource, not a render that compiles them on the Allocate path."""
    d = definition({"V": "{{ units | length }}"}, precompile=False)
    with pytest.raises(TemplateRenderError, match="templates were not compiled"):
        plan_allocation(d, [DONGLE])


def test_none_renders_empty() -> None:
    """A missing NUMA node or major renders as an empty string, not 'None'."""
    assert render_env("[{{ units[1].numa_node }}]") == "[]"


def test_undefined_attribute_names_resource_and_key() -> None:
    """A device attribute it lacks fails the render with the resource, key and source
    (a field name that no device has is refused at load: test_template_fields.py)."""
    with pytest.raises(TemplateRenderError) as info:
        render_env("{{ devices[0].attributes.nosuch }}")
    message = str(info.value)
    assert "example.com/serial" in message
    assert "allocate.env.V" in message
    assert "nosuch" in message


def test_index_out_of_range_is_a_render_error() -> None:
    """Indexing past the allocated units is a clear render error."""
    with pytest.raises(TemplateRenderError, match=r"allocate\.env\.V"):
        render_env("{{ units[5].id }}")


def test_relative_rendered_mount_path_is_refused() -> None:
    """A mount path that renders relative is refused with the key and the value."""
    d = definition(mounts=[MountTemplate("{{ units[0].id }}", "/x")])
    with pytest.raises(UnsafeAllocationError, match=r"mounts\[0\]\.hostPath rendered 'ftdi-A1'"):
        plan_allocation(d, [DONGLE])


def test_literal_values_skip_jinja() -> None:
    """Values without template markup are returned as written, never rendered."""
    compiled = compile_templates(AllocateSpec(env=frozen_map({"A": "plain", "B": "{{ 1 }}"})))
    literal, templated = (value for _, value in compiled.env)
    assert literal.template is None
    assert templated.template is not None


@pytest.mark.parametrize(
    "source",
    ["plain", "line\n", "two\nlines\n", "crlf\r\nend\r\n", "keep\n\n", "a } b { c", "%s 100%"],
)
def test_literal_fast_path_matches_jinja(source: str) -> None:
    """The literal fast path gives exactly what Jinja would render for the same text."""
    jinja = ImmutableSandboxedEnvironment(keep_trailing_newline=False)
    expected = jinja.from_string(source).render()
    assert render_env(source) == expected


def test_output_length_is_capped() -> None:
    """A value that renders beyond the cap fails instead of building a huge response."""
    with pytest.raises(TemplateRenderError, match="exceeds"):
        render_env("{% for i in 'x' * 60000 %}{{ devices[0].path }}{% endfor %}")
