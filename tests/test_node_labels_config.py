"""``labels`` in the config: label keys checked at load with their position, templates
compiled over what a label sees, literal values checked, the default and its opt-out."""

from __future__ import annotations

import pytest

from genericdp.config import load_text
from genericdp.config.v1.labels import LabelSpec, present_label
from genericdp.errors import ConfigError


def _load(labels: str, name: str = "example.com/serial") -> LabelSpec:
    text = (
        f"version: v1\nresources:\n  - name: {name}\n    match: [glob: /dev/ttyUSB*]\n"
        f"    labels:\n{labels}"
    )
    return load_text(text, "labels.yaml").resources[0].labels


def _problems(labels: str, name: str = "example.com/serial") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(labels, name)
    return [f"{i.line}:{i.column}: {i.message}" for i in caught.value.issues]


def test_good_keys_and_templates_load_with_the_default_label() -> None:
    """Prefixed and bare keys, templates over units and literal values load; the default
    ``<resource>.present`` is added beside them."""
    spec = _load(
        '      example.com/serial.model: "{{ units[0].properties.ID_MODEL }}"\n'
        '      serial-count: "{{ units | length }}"\n'
        "      feature.node.kubernetes.io/serial: 'yes'\n"
        "      example.com/serial.ids: \"{{ devices | map(attribute='unit_id') | join('.') }}\"\n"
    )
    keys = [key for key, _ in spec.templates("example.com/serial")]
    assert keys == sorted(
        [
            "example.com/serial.ids",
            "example.com/serial.model",
            "example.com/serial.present",
            "feature.node.kubernetes.io/serial",
            "serial-count",
        ]
    )


def test_a_resource_without_labels_publishes_the_default_only() -> None:
    """No ``labels``: the resource still publishes ``<name>.present: "true"``."""
    text = "version: v1\nresources:\n  - name: example.com/serial\n    match: [glob: /dev/x*]\n"
    definition = load_text(text, "labels.yaml").resources[0]
    assert definition.labels.templates(definition.name) == (("example.com/serial.present", "true"),)


def test_null_turns_the_default_off_and_a_value_replaces_it() -> None:
    """``<name>.present: null`` drops the default; a template under that key replaces it."""
    off = _load("      example.com/serial.present: null\n")
    assert off.templates("example.com/serial") == ()
    replaced = _load('      example.com/serial.present: "{{ units | length }}"\n')
    assert replaced.templates("example.com/serial") == (
        ("example.com/serial.present", "{{ units | length }}"),
    )


def test_a_name_too_long_for_the_suffix_has_no_default() -> None:
    """A resource name of 63 characters leaves no room for ``.present``: no default label."""
    name = "example.com/" + "a" * 60
    assert present_label(name) is None
    assert _load('      example.com/x: "1"\n', name).templates(name) == (("example.com/x", "1"),)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("bad key/x", "is not a DNS subdomain"),
        ("example.com/", "the name part is empty"),
        ("example.com/" + "n" * 64, "longer than 63 characters"),
        ("a" * 254 + "/x", "longer than 253 characters"),
        ("example.com/-x", "must be"),
        ("a/b/c", "one '/'"),
        ("kubernetes.io/gpu", "Node Feature Discovery publishes no label under kubernetes.io"),
        ("node.kubernetes.io/gpu", "Node Feature Discovery publishes no label under kubernetes.io"),
    ],
)
def test_bad_keys_are_refused_at_their_position(key: str, says: str) -> None:
    """Each key is a Kubernetes label key that NFD publishes, reported at the key."""
    problems = _problems(f'      "{key}": "1"\n')
    assert len(problems) == 1, problems
    assert problems[0].startswith("6:7: "), problems
    assert says in problems[0]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('"{{ unit[0].id }}"', "unknown name 'unit' (known: resource, node_name, units, devices;"),
        ('"{{ device_ids | first }}"', "unknown name 'device_ids'"),
        ('"{{ units[0].idd }}"', "has no field 'idd' (fields: attributes, id, nodes, numa_node"),
        ('"{{ devices[0].pth }}"', "has no field 'pth'"),
        ('"{{ units[0].id "', "unexpected end of template"),
        ('"{{ units | lenght }}"', "No filter named 'lenght'. Did you mean 'length'?"),
        ('"has spaces"', "label value 'has spaces': a label value must be empty or"),
        ('"' + "v" * 64 + '"', "a label value is at most 63 characters"),
    ],
)
def test_bad_templates_and_literal_values_are_refused_at_the_value(value: str, says: str) -> None:
    """Typos in templates are config errors with the known names or fields, located at the value."""
    problems = _problems(f"      example.com/serial.x: {value}\n")
    assert len(problems) == 1, problems
    assert problems[0].startswith("6:29: "), problems
    assert says in problems[0]


def test_null_on_another_key_is_refused() -> None:
    """null turns off only the default label; on any other key it is a mistake."""
    problems = _problems("      example.com/serial.model: null\n")
    assert problems == [
        (
            "6:33: null turns off only the default label 'example.com/serial.present';"
            " 'example.com/serial.model' is not it (remove the key instead)"
        )
    ]


def test_a_value_that_is_not_a_string_is_refused_by_the_schema() -> None:
    """Label values are strings (templates), never YAML numbers."""
    problems = _problems("      example.com/serial.count: 3\n")
    assert len(problems) == 1
    assert problems[0].startswith("6:33: ")
