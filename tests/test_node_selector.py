"""Node selectors: keys, values and operators checked and matched as Kubernetes does.

The cases follow k8s.io/apimachinery: ``validation.IsQualifiedName`` and
``IsValidLabelValue`` (what a key and a value may be), ``labels.NewRequirement``
(In and NotIn need values, Exists and DoesNotExist take none),
``Requirement.Matches`` (NotIn and DoesNotExist hold on a node without the key)
and ``metav1.LabelSelectorAsSelector`` (``{}`` selects everything; all hold).
"""

from __future__ import annotations

import pytest

from genericdp.config import load_text
from genericdp.config.selector import NodeSelector, Operator, Requirement
from genericdp.errors import ConfigError, ConfigIssue
from genericdp.k8snames import LabelsError, label_key_problem, label_value_problem, parse_labels

HEAD = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - glob: /dev/ttyUSB*
    nodeSelector:
"""

In, NotIn, Exists, DoesNotExist = (
    Operator.IN,
    Operator.NOT_IN,
    Operator.EXISTS,
    Operator.DOES_NOT_EXIST,
)

# (requirement, labels, matches): Requirement.Matches, operator by operator.
MATCHES = [
    (Requirement("zone", In, ("a", "b")), {"zone": "a"}, True),
    (Requirement("zone", In, ("a", "b")), {"zone": "c"}, False),
    (Requirement("zone", In, ("a",)), {}, False),
    (Requirement("zone", In, ("",)), {"zone": ""}, True),
    (Requirement("zone", NotIn, ("a", "b")), {"zone": "c"}, True),
    (Requirement("zone", NotIn, ("a", "b")), {"zone": "b"}, False),
    (Requirement("zone", NotIn, ("a",)), {}, True),
    (Requirement("zone", NotIn, ("a",)), {"other": "a"}, True),
    (Requirement("zone", Exists), {"zone": ""}, True),
    (Requirement("zone", Exists), {"zones": "a"}, False),
    (Requirement("zone", DoesNotExist), {}, True),
    (Requirement("zone", DoesNotExist), {"zone": ""}, False),
    (Requirement("example.com/gpu", In, ("yes",)), {"gpu": "yes"}, False),
]


@pytest.mark.parametrize(("requirement", "labels", "matches"), MATCHES)
def test_each_operator_matches_as_kubernetes_does(
    requirement: Requirement, labels: dict[str, str], matches: bool
) -> None:
    """In needs the key with a listed value; NotIn and DoesNotExist hold without the key."""
    assert requirement.matches(labels) is matches


def _selector(body: str) -> NodeSelector | None:
    (definition,) = load_text(HEAD + body, "c.yaml").resources
    return definition.node_selector


def test_an_empty_selector_selects_every_node() -> None:
    """``nodeSelector: {}`` (and empty matchLabels/matchExpressions) selects every node."""
    for body in ("      {}\n", "      matchLabels: {}\n      matchExpressions: []\n"):
        selector = _selector(body)
        assert selector == NodeSelector()
        assert selector.unmet({}) is None
        assert selector.unmet({"any": "thing"}) is None


def test_no_selector_is_none() -> None:
    """A resource without nodeSelector has none: every node serves it."""
    (definition,) = load_text(HEAD.removesuffix("    nodeSelector:\n"), "c.yaml").resources
    assert definition.node_selector is None


def test_match_labels_and_expressions_must_all_hold() -> None:
    """matchLabels entries are In requirements, ANDed with every expression."""
    selector = _selector(
        '      matchLabels: {example.com/gpu: "true", zone: a}\n'
        "      matchExpressions:\n"
        "        - {key: tier, operator: NotIn, values: [spot]}\n"
        "        - {key: maintenance, operator: DoesNotExist}\n"
    )
    assert selector is not None
    good = {"example.com/gpu": "true", "zone": "a"}
    assert selector.unmet(good) is None
    assert selector.unmet({**good, "tier": "on-demand"}) is None
    assert str(selector.unmet({**good, "tier": "spot"})) == "tier notin (spot)"
    assert str(selector.unmet({**good, "maintenance": ""})) == "!maintenance"
    assert str(selector.unmet({"zone": "a"})) == "example.com/gpu=true"
    assert str(selector.unmet({"example.com/gpu": "true", "zone": "b"})) == "zone=a"


def test_a_changed_selector_changes_the_definition() -> None:
    """Two definitions differing only in nodeSelector are not equal (a reload sees it)."""
    a = load_text(HEAD + "      matchLabels: {zone: a}\n").resources[0]
    b = load_text(HEAD + "      matchLabels: {zone: b}\n").resources[0]
    assert a != b


VALID_KEYS = [
    "a",
    "zone",
    "A_b.c-D9",
    "example.com/gpu",
    "kubernetes.io/hostname",
    "node-role.kubernetes.io/control-plane",
    "x" * 63,
    "a." * 126 + "b/" + "x" * 63,  # a 253-character prefix
]
INVALID_KEYS = {
    "": "the name part is empty",
    "-a": "must be alphanumeric",
    "a-": "must be alphanumeric",
    "a b": "must be alphanumeric",
    "x" * 64: "longer than 63",
    "example.com/": "the name part is empty",
    "/a": "prefix before '/' is empty",
    "Example.com/a": "is not a DNS subdomain",
    "exa_mple.com/a": "is not a DNS subdomain",
    "-example.com/a": "is not a DNS subdomain",
    "a/b/c": "one '/'",
    "a." * 126 + "bc/x": "longer than 253",
}


@pytest.mark.parametrize("key", VALID_KEYS)
def test_qualified_names_are_label_keys(key: str) -> None:
    """Keys Kubernetes accepts pass."""
    assert label_key_problem(key) is None


@pytest.mark.parametrize(("key", "words"), INVALID_KEYS.items())
def test_keys_kubernetes_rejects_are_rejected(key: str, words: str) -> None:
    """Keys IsQualifiedName rejects are rejected with the reason."""
    problem = label_key_problem(key)
    assert problem is not None
    assert words in problem


@pytest.mark.parametrize("value", ["", "a", "1.2_3-x", "x" * 63])
def test_label_values(value: str) -> None:
    """Values may be empty, and at most 63 characters of the name alphabet."""
    assert label_value_problem(value) is None


@pytest.mark.parametrize("value", ["-a", "a.", "a b", "x" * 64, "a/b"])
def test_bad_label_values(value: str) -> None:
    """Values IsValidLabelValue rejects are rejected."""
    assert label_value_problem(value) is not None


def _issues(body: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load_text(HEAD + body, "c.yaml")
    return list(caught.value.issues)


def test_bad_keys_and_values_are_located() -> None:
    """Each bad key or value is reported at its own line and column with its path."""
    issues = _issues(
        "      matchLabels:\n"
        "        Bad/x: v\n"
        "        ok: -bad\n"
        "      matchExpressions:\n"
        "        - {key: a/b/c, operator: Exists}\n"
        '        - {key: zone, operator: In, values: [a, "b c"]}\n'
    )
    where = [(i.line, i.column, i.path) for i in issues]
    assert where == [
        (8, 9, 'resources[0].nodeSelector.matchLabels["Bad/x"]'),
        (9, 13, "resources[0].nodeSelector.matchLabels.ok"),
        (11, 17, "resources[0].nodeSelector.matchExpressions[0].key"),
        (12, 49, "resources[0].nodeSelector.matchExpressions[1].values[1]"),
    ]
    assert all(str(i).startswith(f"c.yaml:{i.line}:{i.column}: ") for i in issues)


NO_VALUES = "takes no values (remove values, or use In or NotIn)"


def test_operators_take_the_values_kubernetes_requires() -> None:
    """In and NotIn need at least one value; Exists and DoesNotExist take none."""
    issues = _issues(
        "      matchExpressions:\n"
        "        - {key: a, operator: In}\n"
        "        - {key: b, operator: NotIn, values: []}\n"
        "        - {key: c, operator: Exists, values: [x]}\n"
        "        - {key: d, operator: DoesNotExist, values: [y]}\n"
        "        - {key: e, operator: Exists, values: []}\n"
    )
    messages = [(i.path, i.message) for i in issues]
    base = "resources[0].nodeSelector.matchExpressions"
    assert messages == [
        (f"{base}[0]", "operator In needs at least one value"),
        (f"{base}[1].values", "operator NotIn needs at least one value"),
        (
            f"{base}[2].values",
            "operator Exists takes no values (remove values, or use In or NotIn)",
        ),
        (
            f"{base}[3].values",
            "operator DoesNotExist takes no values (remove values, or use In or NotIn)",
        ),
    ]


def test_unknown_operators_and_fields_are_schema_errors() -> None:
    """An operator outside the four, or an unknown key, is refused by the schema."""
    issues = _issues(
        "      matchExpressions:\n"
        '        - {key: a, operator: Gt, values: ["1"]}\n'
        "      nodeName: x\n"
    )
    paths = sorted(i.path for i in issues)
    assert paths == [
        "resources[0].nodeSelector.matchExpressions[0].operator",
        "resources[0].nodeSelector.nodeName",
    ]


def test_node_labels_parse_from_the_command_line_form() -> None:
    """``k=v,k2=v2`` gives labels, an empty value included; bad ones say which."""
    assert parse_labels("zone=a, example.com/gpu=,x=1") == {
        "zone": "a",
        "example.com/gpu": "",
        "x": "1",
    }
    assert parse_labels("") == {}
    for text, words in (
        ("zone", "is not key=value"),
        ("Bad/x=1", "not a DNS subdomain"),
        ("zone=a b", "value 'a b' of zone"),
        ("a=1,a=2", "given twice"),
    ):
        with pytest.raises(LabelsError, match=words):
            parse_labels(text)
