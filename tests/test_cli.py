"""The command line as a user runs it: real subprocesses, real files, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakesys import FakeHost
from tests.hostenv import own_env

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "configs" / "examples"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = own_env()
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "genericdp", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        check=False,
    )


GOOD = """\
version: v1
resources:
  - name: example.com/serial
    match:
      - glob: /dev/ttyUSB*
    allocate:
      env:
        PORTS: "{{ devices | map(attribute='path') | join(',') }}"
"""


def test_validate_accepts_every_example() -> None:
    """Every shipped example validates on its own, and validate says what it found."""
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    assert len(files) >= 9
    for file in files:
        result = run("validate", file)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("ok: ")
        assert file in result.stdout


def test_validate_finds_duplicates_across_files(tmp_path: Path) -> None:
    """Two files defining one resource name are refused, naming both places."""
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    result = run("validate", str(tmp_path))
    assert result.returncode == 1
    assert f"{tmp_path / 'b.yaml'}:3:" in result.stderr
    assert f"{tmp_path / 'a.yaml'}:3" in result.stderr


def test_validate_reports_file_line_and_key(tmp_path: Path) -> None:
    """An invalid file exits 1 with file:line:column, the key path and no traceback."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("    allocate:", "    colour: blue\n    allocate:"))
    result = run("validate", str(bad))
    assert result.returncode == 1
    assert f"{bad}:6:" in result.stderr
    assert "colour" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    """A path that does not exist is reported, not a traceback."""
    result = run("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert "nope.yaml" in result.stderr
    assert "Traceback" not in result.stderr


def test_schema_prints_the_packaged_schema() -> None:
    """`schema` prints JSON identical to schemas/config-v1.schema.json."""
    result = run("schema")
    assert result.returncode == 0
    printed = json.loads(result.stdout)
    shipped = json.loads((REPO / "schemas" / "config-v1.schema.json").read_text())
    assert printed == shipped


def test_discover_json_on_a_fake_tree(tmp_path: Path) -> None:
    """`discover --json` lists units, IDs and the allocation of one unit from a fake tree."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run(
        "discover",
        str(cfg),
        "--json",
        "--dev-root",
        str(host.dev),
        "--sys-root",
        str(host.sys),
        "--udev-root",
        str(host.udev),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    (res,) = data["resources"]
    assert res["resource"] == "example.com/serial"
    assert res["capacity"] == 1
    (unit,) = res["units"]
    assert unit["nodes"] == [{"hostPath": "/dev/ttyUSB0", "containerPath": "/dev/ttyUSB0"}]
    alloc = res["exampleAllocation"]
    assert alloc["env"] == {"PORTS": "/dev/ttyUSB0"}
    assert alloc["devices"] == [
        {"containerPath": "/dev/ttyUSB0", "hostPath": "/dev/ttyUSB0", "permissions": "rw"}
    ]


def test_discover_roots_from_environment(tmp_path: Path) -> None:
    """GENERICDP_DEV_ROOT points discovery at another tree, like the flag does."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-3", serial="ZZ9", ttys=("ttyUSB7",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    env = {
        "GENERICDP_DEV_ROOT": str(host.dev),
        "GENERICDP_SYS_ROOT": str(host.sys),
        "GENERICDP_UDEV_ROOT": str(host.udev),
    }
    result = run("discover", str(cfg), env=env)
    assert result.returncode == 0, result.stderr
    assert "/dev/ttyUSB7" in result.stdout
    assert "PORTS=/dev/ttyUSB7" in result.stdout


def test_discover_missing_dev_root_exits_3(tmp_path: Path) -> None:
    """A device root that does not exist is an environment error with exit code 3."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("discover", str(cfg), "--dev-root", str(tmp_path / "missing"))
    assert result.returncode == 3
    assert "missing" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_setting_in_environment_exits_2(tmp_path: Path) -> None:
    """A malformed GENERICDP_* value names the variable and exits 2."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD)
    result = run("serve", "--config", str(cfg), env={"GENERICDP_RESCAN_INTERVAL": "soon"})
    assert result.returncode == 2
    assert "GENERICDP_RESCAN_INTERVAL" in result.stderr


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="needs a Linux /dev")
def test_discover_demo_on_this_machine() -> None:
    """The README's demo config finds real devices on any Linux machine (/dev/null at least)."""
    result = run("discover", str(EXAMPLES / "demo.yaml"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    paths = {n["hostPath"] for r in data["resources"] for u in r["units"] for n in u["nodes"]}
    assert "/dev/null" in paths


def test_validate_each_checks_every_path_on_its_own(tmp_path: Path) -> None:
    """--each: one name in two files is fine, each file's problems are still found;
    --merged (the default) reads them as one config, as the daemon does."""
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    both = [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")]
    each = run("validate", "--each", *both)
    assert each.returncode == 0, each.stderr
    assert each.stdout.count("ok: 1 resource(s) in 1 file(s)") == 2
    for merged in (run("validate", *both), run("validate", "--merged", *both)):
        assert merged.returncode == 1
        assert "duplicate resource name 'example.com/serial'" in merged.stderr
    (tmp_path / "bad.yaml").write_text(GOOD.replace("glob: /dev/ttyUSB*", "glob: dev/x"))
    mixed = run("validate", "--each", str(tmp_path / "bad.yaml"), *both)
    assert mixed.returncode == 1
    assert f"{tmp_path / 'bad.yaml'}:5:" in mixed.stderr
    assert mixed.stdout.count("ok: ") == 2


def test_validate_each_passes_every_example_at_once() -> None:
    """The shipped examples are separate configs: --each passes them in one call."""
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    result = run("validate", "--each", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok: ") == len(files)


def test_validate_help_says_how_paths_are_combined() -> None:
    """--help names both ways of reading several PATHs."""
    text = " ".join(run("validate", "--help").stdout.split())
    assert "--each" in text
    assert "--merged" in text
    assert "as one config" in text


def test_discover_table_header_lines_up_with_its_rows(tmp_path: Path) -> None:
    """Unit IDs shorter than the UNIT heading (here "0") still put every column under it."""
    host = FakeHost(tmp_path / "host")
    host.add_usb_serial(port="1-2", serial="A1B2C3", ttys=("ttyUSB0",))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(GOOD + '    groupBy: {pathRegex: "ttyUSB(?P<key>[0-9]+)"}\n')
    env = {
        "GENERICDP_DEV_ROOT": str(host.dev),
        "GENERICDP_SYS_ROOT": str(host.sys),
        "GENERICDP_UDEV_ROOT": str(host.udev),
    }
    result = run("discover", str(cfg), env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("UNIT "))
    header, row = lines[at], lines[at + 1]
    assert row.split()[0] == "0", row
    assert row.index("-") == header.index("NUMA"), (header, row)
    assert row.index("Healthy") == header.index("HEALTH"), (header, row)
    assert row.index("/dev/ttyUSB0") == header.index("NODES"), (header, row)
