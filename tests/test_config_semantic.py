"""Rules beyond the schema, and how schema and semantic findings combine."""

from __future__ import annotations

import pytest

from genericdp.config import load_text
from genericdp.errors import ConfigError, ConfigIssue

HEAD = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - glob: /dev/ttyUSB*
"""


def _issues(extra: str) -> tuple[ConfigIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load_text(HEAD + extra, "c.yaml")
    return caught.value.issues


def test_bare_command_names_and_template_mount_sources_are_allowed() -> None:
    """argv[0] may be a bare name looked up in PATH; a templated mount source is not checked."""
    extra = """\
    health: {exec: [test, -c, /dev/ttyUSB0]}
    hooks: {init: {exec: [stty, "-F", /dev/ttyUSB0]}}
    allocate:
      mounts: [{hostPath: "{{ devices[0].host_path }}", containerPath: /dev/serial}]
"""
    (definition,) = load_text(HEAD + extra).resources
    assert definition.allocate.mounts[0].host_path == "{{ devices[0].host_path }}"


def test_relative_container_path_is_rejected() -> None:
    """Mount container paths must be absolute too."""
    (issue,) = _issues("    allocate:\n      mounts: [{hostPath: /run/x, containerPath: run/x}]\n")
    assert issue.path == "resources[0].allocate.mounts[0].containerPath"
    assert "must be an absolute path" in issue.message


def test_explicit_health_timeout_not_below_interval_is_reported_at_timeout() -> None:
    """A timeout as long as the interval is reported at the timeout, with both values."""
    (issue,) = _issues("    health: {exec: [probe], interval: 5s, timeout: 5000ms}\n")
    assert issue.path == "resources[0].health.timeout"
    assert "health timeout 5000ms must be shorter than interval 5s" in issue.message


def test_glob_climbing_out_of_dev_is_rejected() -> None:
    """A glob under /dev/ may not escape it with '..'."""
    text = HEAD.replace("/dev/ttyUSB*", "/dev/../etc/*")
    with pytest.raises(ConfigError, match=r"must not contain '\.\.'"):
        load_text(text)


def test_permissions_are_kept_in_canonical_order() -> None:
    """'wr' and 'rw' are the same permissions and compare equal."""
    (a,) = load_text(HEAD + "    permissions: wr\n").resources
    (b,) = load_text(HEAD + "    permissions: rw\n").resources
    assert a == b
    assert a.permissions == "rw"


def test_yaml_1_2_reads_yes_and_on_as_strings() -> None:
    """Under YAML 1.2 an unquoted yes/on/no is text, so it is a fine env value."""
    (definition,) = load_text(HEAD + "    allocate: {env: {A: yes, B: on, C: no}}\n").resources
    assert dict(definition.allocate.env) == {"A": "yes", "B": "on", "C": "no"}


def test_a_bad_name_is_reported_once() -> None:
    """A name failing both the schema pattern and the kubelet rules gives one issue."""
    (issue,) = _issues("  - name: Example.com/x\n    match: [{glob: /dev/x}]\n")
    assert issue.path == "resources[1].name"
    assert "DNS subdomain" in issue.message


def test_an_unknown_version_hides_the_rest() -> None:
    """A file of another version gets only the version issue, not v1 noise."""
    with pytest.raises(ConfigError) as caught:
        load_text("version: v3\nplugins: []\n")
    (issue,) = caught.value.issues
    assert issue.path == "version"


def test_templates_of_a_mistyped_allocate_are_not_compiled() -> None:
    """When allocate has the wrong shape, only the shape is reported."""
    (issue,) = _issues("    allocate: {env: [A, B]}\n")
    assert issue.path == "resources[0].allocate.env"
    assert "must be a mapping" in issue.message


def test_issue_text_has_file_line_column_and_path() -> None:
    """Each issue prints as file:line:column: path: message."""
    (issue,) = _issues("    count: 1001\n")
    assert str(issue) == "c.yaml:6:12: resources[0].count: must be between 1 and 1000, not 1001"


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        (
            '    hooks:\n      init:\n        exec: [/bin/echo, "path={{ devices[0].path }}"]\n',
            "resources[0].hooks.init.exec[1]",
        ),
        (
            "    hooks:\n      cleanup: {exec: [/bin/sh, -c, '{% for d in devices %}x{% endfor %}']}\n",  # noqa: E501
            "resources[0].hooks.cleanup.exec[2]",
        ),
        (
            '    health: {exec: [/usr/bin/test, -c, "{{ unit.id }}"]}\n',
            "resources[0].health.exec[2]",
        ),
    ],
)
def test_a_template_in_a_command_is_refused_where_it_is(extra: str, path: str) -> None:
    """Hook and probe arguments are never rendered: a template there would reach the
    command as written, so validation says so, at the item's line and column."""
    (issue,) = _issues(extra)
    assert issue.path == path
    assert "never rendered as templates" in issue.message
    assert "GENERICDP_" in issue.message
    assert issue.line is not None
    assert issue.column is not None
    line = (HEAD + extra).splitlines()[issue.line - 1]
    assert line[issue.column - 1 :].startswith(('"', "'")), (issue.line, issue.column)


@pytest.mark.parametrize(("parent", "key"), [("allocate", "env"), ("hooks", "init")])
def test_a_key_indented_one_level_too_little_is_one_issue_at_its_line(
    parent: str, key: str
) -> None:
    """`allocate:` left empty with `env:` below it at its indentation: one issue, at the
    line of env, not an unknown key plus an empty allocate placed at env's line."""
    value = '{A: "x"}' if key == "env" else "{exec: [/bin/true]}"
    (issue,) = _issues(f"    {parent}:\n    {key}: {value}\n")
    assert issue.path == f"resources[0].{parent}"
    assert (issue.line, issue.column) == (7, 5)
    assert issue.message == (
        f"{key!r} belongs under {parent!r} (line 6), which is empty: indent {key!r} and what"
        " follows two spaces more"
    )
