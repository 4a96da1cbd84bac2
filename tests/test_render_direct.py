"""Templates rendered without Jinja (config/directrender.py) give exactly Jinja's
output, errors and budget spending, hostile templates and values included."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

from genericdp.config import sandbox, templates
from genericdp.config.templates import (
    MAX_VALUE_CHARS,
    TEMPLATE_NAMES,
    TemplateSyntaxErrors,
    TemplateValue,
    allocation_budget,
)


def compiled(source: str) -> TemplateValue:
    """``source`` compiled, without the load-time field check: the renderers are
    compared on contexts of any shape, fields missing included."""
    done, problems = templates._compiled(source, TEMPLATE_NAMES)
    if done is None:
        raise TemplateSyntaxErrors(problems)
    return TemplateValue(source, done.template, done.plan, done.names)


_ADDRESS = re.compile(r"at 0x[0-9a-f]+")


def is_direct(value: TemplateValue) -> bool:
    """Whether ``render`` may skip Jinja (literal text, or a ``directrender`` plan)."""
    return value.template is None or value.plan is not None


def through_jinja(value: TemplateValue, ctx: dict[str, Any]) -> str:
    """``value`` rendered by Jinja whatever its form: the same template without its plan."""
    return TemplateValue(value.source, value.template, None, value.names).render(ctx)


def node(path: str, minor: int | None, **attributes: str) -> dict[str, Any]:
    return {
        "path": path,
        "host_path": path,
        "container_path": path,
        "major": 188,
        "minor": minor,
        "subsystem": "tty",
        "numa_node": None,
        "attributes": dict(attributes),
        "properties": {"ID_SERIAL_SHORT": "A1"},
        "unit_id": "u0",
    }


def context(
    *,
    node_name: str = "node-1",
    device_ids: list[str] | None = None,
    attributes: dict[str, str] | None = None,
    nodes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A context as render.py builds it; the keyword arguments make it hostile."""
    nodes = [node("/dev/ttyUSB0", 0), node("/dev/ttyUSB1", None)] if nodes is None else nodes
    units = [
        {
            "id": "u0",
            "nodes": nodes,
            "numa_node": 1,
            "attributes": {"product": "Widget"} if attributes is None else attributes,
            "properties": {},
        }
    ]
    return {
        "resource": "example.com/serial",
        "node_name": node_name,
        "units": units,
        "devices": nodes,
        "device_ids": ["u0::0", "u0::1"] if device_ids is None else device_ids,
    }


CONTEXTS = {
    "usual": context(),
    "empty lists": context(device_ids=[], nodes=[]),
    # attribute keys that are also dict methods: the sandbox prefers the method
    "method-named keys": context(attributes={"items": "I", "get": "G", "product": "P"}),
    "NUL and newlines": context(node_name="a\x00b\nc", attributes={"product": "x\x00"}),
    "a name over the output cap": context(node_name="n" * (MAX_VALUE_CHARS + 1)),
    "a list over the join cap": context(device_ids=["x"] * (MAX_VALUE_CHARS + 2)),
    "a join just under the cap": context(device_ids=["ab"] * (MAX_VALUE_CHARS // 3)),
    "items of other types": context(nodes=[node("/dev/a", 1), {"path": ["nested", {"x": 1}]}]),
    "not a list": context(device_ids={"a": 1}),  # type: ignore[arg-type]
}

SOURCES = [
    "{{ node_name }}",
    "{{node_name}}",
    "{{- node_name -}}",
    "  {{- node_name }}  ",
    "{{ node_name }}\n",
    "a\r\nb {{ node_name }}\r\n",
    "{{ resource }}/{{ node_name }}",
    "{# a comment #}{{ node_name }}",
    "{% raw %}{{ x }}{% endraw %}{{ node_name }}",
    "{{ device_ids | join(',') }}",
    "{{ device_ids|join }}",
    "{{ device_ids | join(d='-') }}",
    "{{ device_ids | join(',', attribute='x') }}",
    "{{ devices | map(attribute='path') | join(',') }}",
    "{{ devices | map(attribute='minor') | join(',') }}",
    "{{ devices | map(attribute='numa_node') | join(' ') }}",
    "{{ devices | map(attribute='attributes') | join(';') }}",
    "{{ devices | map(attribute='nosuch') | join(',') }}",
    "{{ devices | map(attribute='path', default='x') | join(',') }}",
    "{{ devices | map(attribute='0') | join(',') }}",
    "{{ devices | map('upper') | join }}",
    "{{ devices | map(attribute='path') }}",
    "{{ units | map(attribute='id') | join(',') }}",
    "{{ units | join(',') }}",
    "{{ units[0].id }}",
    "{{ units[0]['id'] }}",
    "{{ units[-1].id }}",
    "{{ units[5].id }}",
    "{{ units.0.id }}",
    "{{ units[0].attributes.product }}",
    "{{ units[0].attributes.items }}",
    "{{ units[0].attributes['items'] }}",
    "{{ units[0].attributes.get }}",
    "{{ units[0].nodes[0].path }}",
    "{{ units[0].nodes[1].minor }}",
    "{{ devices[0].path }}",
    "{{ devices[0].numa_node }}",
    "{{ devices[0]['path'] }}",
    "{{ devices['path'] }}",
    "{{ devices }}",
    "{{ units }}",
    "{{ units[0] }}",
    "{{ device_ids }}",
    "{{ device_ids[0] }}",
    "{{ node_name[0] }}",
    "{{ node_name.upper }}",
    "{{ node_name ~ 'x' }}",
    "{% if node_name %}{{ node_name }}{% endif %}",
]


def outcome(value: TemplateValue, ctx: dict[str, Any], *, jinja: bool) -> tuple[Any, ...]:
    """What rendering does, both ways: the output or the error, and the work spent."""
    with allocation_budget():
        budget = sandbox._BUDGET.get()  # the spending is compared too
        assert budget is not None
        try:
            out: Any = through_jinja(value, ctx) if jinja else value.render(ctx)
        except Exception as exc:  # noqa: BLE001 -- every error a template can raise, compared
            out = (type(exc), str(exc))
        # A generator prints with its address (``{{ x | map(...) }}``): not compared.
        out = _ADDRESS.sub("at 0x?", out) if isinstance(out, str) else out
        return out, budget.work, budget.iterations


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("name", list(CONTEXTS))
def test_direct_render_is_jinjas(source: str, name: str) -> None:
    """Output, error and work spent are the same with and without Jinja."""
    value = compiled(source)
    ctx = CONTEXTS[name]
    assert outcome(value, ctx, jinja=False) == outcome(value, ctx, jinja=True)


@pytest.mark.parametrize(
    "source",
    [
        "{{ node_name }}",
        "/dev/{{ units[0].id }}-{{ units[0].attributes.product }}",
        "{{ device_ids | join(',') }}",
        "{{ devices | map(attribute='path') | join(',') }}",
        "{{ units | map(attribute='id') | join }}",
        "{{ devices[0]['path'] }}",
    ],
)
def test_the_usual_forms_skip_jinja(source: str) -> None:
    """The forms configs use are planned, so the comparison above tests the direct path."""
    assert is_direct(compiled(source))


@pytest.mark.parametrize(
    "source",
    [
        "{% if node_name %}x{% endif %}",
        "{{ node_name ~ 'x' }}",
        "{{ 'literal' }}",
        "{{ devices | map(attribute='path', default='x') | join(',') }}",
        "{{ devices | map(attribute='a.b') | join(',') }}",
        "{{ device_ids | join(',', attribute='x') }}",
        "{{ device_ids | length }}",
        "{{ (device_ids | join(','))[0] }}",
    ],
)
def test_other_forms_are_left_to_jinja(source: str) -> None:
    """Anything outside the small grammar has no plan."""
    assert not is_direct(compiled(source))


def random_sources(seed: int, count: int) -> Iterator[str]:
    """Templates from the grammar's pieces and near misses, in random shapes."""
    rng = random.Random(seed)  # noqa: S311 -- reproducible test input
    names = ["node_name", "resource", "units", "devices", "device_ids"]
    steps = [".id", ".path", ".minor", ".nodes", ".attributes", ".product", ".items", ".keys"]
    steps += ["[0]", "[1]", "[-1]", "[99]", "['id']", "['path']", "['items']", ".0"]
    attributes = ["path", "id", "minor", "numa_node", "attributes", "nodes", "nosuch", "items"]
    texts = ["", "x", "/dev/", " ", "\n", "{# c #}", "-"]
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 3)):
            expression = rng.choice(names) + "".join(
                rng.choice(steps) for _ in range(rng.randint(0, 3))
            )
            kind = rng.randint(0, 3)
            separator = rng.choice(["", "','", "' '", "'::'"])
            if kind == 1:
                expression += f" | join({separator})"
            elif kind == 2:
                attribute = rng.choice(attributes)
                expression += f" | map(attribute='{attribute}') | join({separator})"
            open_, close = rng.choice([("{{ ", " }}"), ("{{- ", " -}}"), ("{{", "}}")])
            parts.append(rng.choice(texts) + open_ + expression + close + rng.choice(texts))
        yield "".join(parts)


def test_random_templates_render_as_jinja_does() -> None:
    """Thousands of generated templates, over every context: the same outcome each time."""
    small = [c for name, c in CONTEXTS.items() if "cap" not in name]  # the large ones are slow
    direct = 0
    for source in random_sources(seed=10, count=600):
        value = compiled(source)
        direct += is_direct(value)
        for ctx in small:
            assert outcome(value, ctx, jinja=False) == outcome(value, ctx, jinja=True), source
    assert direct > 400  # most of them exercise the direct path


def test_a_spent_slice_stops_both_ways_alike() -> None:
    """A render past its slice gives up at the same point with and without Jinja."""
    for source in SOURCES:
        value = compiled(source)
        results: list[object] = []
        for jinja in (False, True):
            with allocation_budget(-1.0):  # every spend is past the slice
                try:
                    results.append(
                        through_jinja(value, CONTEXTS["usual"])
                        if jinja
                        else value.render(CONTEXTS["usual"])
                    )
                except Exception as exc:  # noqa: BLE001 -- every error a template can raise, compared
                    results.append((type(exc), str(exc)))
        assert results[0] == results[1], source


def test_the_work_budget_runs_out_at_the_same_render() -> None:
    """Renders sharing one allocation's budget stop at the same one either way."""
    value = compiled("{{ device_ids | join(',') }}")
    ctx = context(device_ids=["x" * 1000] * 60)  # 60 KB a render: out of work in 140
    stops = []
    for jinja in (False, True):
        with allocation_budget():
            for i in range(10_000):
                try:
                    through_jinja(value, ctx) if jinja else value.render(ctx)
                except Exception as exc:  # noqa: BLE001 -- every error a template can raise, compared
                    stops.append((i, str(exc)))
                    break
    assert stops[0] == stops[1]
    assert "built more than" in stops[0][1]
