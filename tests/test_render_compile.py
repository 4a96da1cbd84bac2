"""compile_templates: every problem reported, with key and line, at load time."""

from __future__ import annotations

import pytest

from genericdp.config.model import AllocateSpec, MountTemplate, frozen_map
from genericdp.config.templates import TemplateProblem, TemplateSyntaxErrors, compile_templates


def problems_of(spec: AllocateSpec) -> tuple[TemplateProblem, ...]:
    with pytest.raises(TemplateSyntaxErrors) as info:
        compile_templates(spec)
    return info.value.problems


def env_problems(source: str) -> tuple[TemplateProblem, ...]:
    return problems_of(AllocateSpec(env=frozen_map({"V": source})))


def test_valid_templates_compile() -> None:
    """Templates using only the documented names compile without problems."""
    spec = AllocateSpec(
        env=frozen_map({"A": "{{ resource }} {{ node_name }} {{ device_ids }}"}),
        mounts=(MountTemplate("/run/{{ units[0].id }}", "/run/x"),),
        annotations=frozen_map({"k": "{% for d in devices %}{{ d.path }}{% endfor %}"}),
    )
    assert compile_templates(spec) is not None


def test_every_failure_is_collected_with_its_key() -> None:
    """All bad templates are reported together, keyed relative to allocate."""
    spec = AllocateSpec(
        env=frozen_map({"GOOD": "{{ units }}", "BAD": "{{ 1 + }}"}),
        mounts=(
            MountTemplate("/ok", "/ok"),
            MountTemplate("/{{ unitz }}", "/{% if %}"),
        ),
        annotations=frozen_map({"example.com/a": "{{ x | nosuchfilter }}"}),
    )
    keys = [p.key for p in problems_of(spec)]
    assert sorted(keys) == [
        "annotations.example.com/a",
        "env.BAD",
        "mounts[1].containerPath",
        "mounts[1].hostPath",
    ]


def test_syntax_error_reports_its_line() -> None:
    """A syntax error carries the 1-based line within the template."""
    (problem,) = env_problems("first\n{{ units }}\n{{ devices devices }}")
    assert problem.key == "env.V"
    assert problem.line == 3
    assert "expected token" in problem.message


def test_unknown_name_suggests_the_close_one() -> None:
    """A misspelt name is reported with the known names and a suggestion."""
    (problem,) = env_problems("{{ devices | length }}\n{{ devcies | length }}")
    assert problem.message == (
        "unknown name 'devcies' (known: resource, node_name, units, devices, device_ids;"
        " did you mean 'devices'?)"
    )
    assert problem.line == 2


def test_unknown_name_without_close_match() -> None:
    """A name nothing like a known one is still reported, without a guess."""
    (problem,) = env_problems("{{ zzz }}")
    assert "unknown name 'zzz'" in problem.message
    assert "did you mean" not in problem.message


def test_names_bound_inside_the_template_are_known() -> None:
    """Loop variables, loop and set names are not unknown names."""
    source = (
        "{% set sep = ',' %}{% for d in devices %}{{ loop.index }}{{ d.path }}{{ sep }}{% endfor %}"
    )
    compile_templates(AllocateSpec(env=frozen_map({"V": source})))


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("{% include 'other.j2' %}", "'include' is not supported"),
        ("{% import 'macros.j2' as m %}", "'import' is not supported"),
        ("{% from 'macros.j2' import f %}", "'import' is not supported"),
        ("{% extends 'base.j2' %}", "'extends' is not supported"),
        ("{% macro f() %}x{% endmacro %}", "macros are not supported"),
        ("{% block b %}x{% endblock %}", "blocks are not supported"),
        ("{% for u in units recursive %}{{ loop(u.nodes) }}{% endfor %}", "recursive loops"),
    ],
)
def test_refused_constructs_fail_at_compile_time(source: str, fragment: str) -> None:
    """Constructs that read files or can recurse are refused when the config loads."""
    messages = [p.message for p in env_problems(source)]
    assert any(fragment in m for m in messages), messages


def test_unknown_filter_is_a_compile_error() -> None:
    """A filter that does not exist fails at load time, not at Allocate."""
    (problem,) = env_problems("{{ devices | shuffle }}")
    assert "shuffle" in problem.message


def test_random_filter_is_not_available() -> None:
    """Allocations must be deterministic, so the random filter is refused."""
    (problem,) = env_problems("{{ devices | random }}")
    assert "random" in problem.message
