"""Every setting is a flag and a GENERICDP_* variable of the commands that use it;
every exit code is documented. The CLI in process (``cli.main``), on real files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args, get_origin

import pytest

from genericdp import cli, cliparser, exits
from genericdp.discovery.model import Roots
from genericdp.settings import SIMULATE_SKIPS, DiscoverySettings, Settings
from tests.fakesys import FakeHost
from tests.hostenv import own_env

REPO = Path(__file__).resolve().parents[1]

NODE_CONFIG = """\
version: v1
resources:
  - name: example.com/fuse
    match:
      - glob: /dev/fuse
    allocate:
      env:
        NODE: "{{ node_name }}"
"""


def _sample(annotation: object) -> str:
    """A valid value of a setting's type, as a flag would spell it."""
    if get_origin(annotation) is Literal:
        return str(get_args(annotation)[-1])
    return {Path: "/somewhere", float: "1.5", str: "node-a:1"}[annotation]  # type: ignore[index]


@pytest.mark.parametrize(
    ("command", "model", "skip"),
    [
        ("serve", Settings, frozenset[str]()),
        ("discover", DiscoverySettings, frozenset[str]()),
        ("simulate", Settings, SIMULATE_SKIPS),
    ],
)
def test_every_setting_is_a_flag(
    command: str, model: type[DiscoverySettings], skip: frozenset[str]
) -> None:
    """Each field of the settings model parses as a flag of the commands that use it."""
    parser = cliparser.build_parser()
    positional = [] if command == "serve" else ["c.yaml"]
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        value = _sample(field.annotation)
        args = parser.parse_args([command, *positional, cliparser.flag(name), value])
        assert str(getattr(args, name)) == value, name
        assert name in args.settings


def test_serve_help_names_every_variable(capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --help` names the GENERICDP_* variable of every setting."""
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for name in Settings.model_fields:
        assert f"GENERICDP_{name.upper()}" in shown, name


def test_discover_takes_node_name_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GENERICDP_NODE_NAME reaches discover's templates, like --node-name does."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(NODE_CONFIG)
    host = FakeHost(tmp_path / "host")
    host.add_misc("fuse")
    roots = [
        "--dev-root",
        str(host.dev),
        "--sys-root",
        str(host.sys),
        "--udev-root",
        str(host.udev),
    ]
    monkeypatch.setenv("GENERICDP_NODE_NAME", "from-env")
    assert cli.main(["discover", str(cfg), "--json", *roots]) == exits.EXIT_OK
    (res,) = json.loads(capsys.readouterr().out)["resources"]
    assert res["exampleAllocation"]["env"] == {"NODE": "from-env"}
    assert cli.main(["discover", str(cfg), "--json", "--node-name", "from-flag", *roots]) == 0
    (res,) = json.loads(capsys.readouterr().out)["resources"]
    assert res["exampleAllocation"]["env"] == {"NODE": "from-flag"}


def test_simulate_takes_log_level_from_the_environment(tmp_path: Path) -> None:
    """GENERICDP_LOG_LEVEL=info makes simulate log at info (its own default is warning)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(NODE_CONFIG)
    host = FakeHost(tmp_path / "host")
    host.add_misc("fuse")
    env = own_env()
    command = [sys.executable, "-m", "genericdp", "simulate", str(cfg), "--once"]
    command += ["--dev-root", str(host.dev), "--sys-root", str(host.sys)]
    quiet = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=60, check=False
    )
    loud = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        env={**env, "GENERICDP_LOG_LEVEL": "info"},
        timeout=60,
    )
    assert quiet.returncode == loud.returncode == 0, quiet.stderr + loud.stderr
    assert " info " not in quiet.stderr
    assert "applying config: start example.com/fuse" in loud.stderr


def test_the_reference_lists_every_setting() -> None:
    """docs/reference.md's settings table has a row for every GENERICDP_* variable."""
    readme = (REPO / "docs" / "reference.md").read_text()
    for name in Settings.model_fields:
        assert f"`GENERICDP_{name.upper()}`" in readme, name


def test_every_exit_code_is_documented() -> None:
    """docs/reference.md's exit codes and the CLI's docstring list every code of genericdp.exits."""
    readme = (REPO / "docs" / "reference.md").read_text()
    paragraph = readme[readme.index("Exit codes") :].split("\n\n", 1)[0]
    listed = {int(n) for n in re.findall(r"\b(\d+) [a-z`]", paragraph)}
    codes = {v for k, v in vars(exits).items() if k.startswith("EXIT_")}
    assert listed == codes
    assert exits.__doc__ is not None
    for code in codes:
        assert re.search(rf"^  {code} ", exits.__doc__, re.MULTILINE), code


def test_the_roots_default_to_the_settings_defaults() -> None:
    """``Roots()`` (the host's trees, for discovery used as a library) and the settings
    agree: the settings are where the defaults are written, this keeps the copy honest."""
    fields = Settings.model_fields
    settings_roots = Roots(
        dev=fields["dev_root"].default,
        sys=fields["sys_root"].default,
        udev=fields["udev_root"].default,
    )
    assert Roots() == settings_roots
