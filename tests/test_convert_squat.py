"""`genericdp convert`: squat/generic-device-plugin configs -> config v1 serving the same nodes."""

from __future__ import annotations

import fnmatch
import itertools
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from genericdp.cli import main
from genericdp.config import load_text
from genericdp.convert import convert_squat
from genericdp.convert.goglob import go_glob
from genericdp.convert.groupkeys import group_regex
from genericdp.discovery import discover
from genericdp.errors import ConfigError
from genericdp.exits import EXIT_FAILED, EXIT_INVALID, EXIT_OK, EXIT_USAGE
from tests.fakesys import FakeHost
from tests.squat_reference import Node, _go_match, squat_units

DATA = Path(__file__).parent / "data" / "squat"


def _load(path: Path) -> Any:
    return YAML(typ="safe", pure=True).load(path.read_text())


def _manifest_devices() -> list[str]:
    """The --device values of squat's own DaemonSet manifest."""
    manifest = _load(DATA / "manifest-generic-device-plugin.yaml")
    args = manifest["spec"]["template"]["spec"]["containers"][0]["args"]
    return [value for flag, value in itertools.pairwise(args) if flag == "--device"]


# The help text's USB group fragment, wrapped in a device (README.md, --device help).
_USB_HELP = (
    '{"name": "usb", "groups": [{"usb": [{"vendor": "1209", "product": "000F"},'
    ' {"vendor": "1209", "product": "000F", "serial": "00000001"}]}]}'
)
EXAMPLES = [*_load(DATA / "readme-devices.yaml"), *_manifest_devices(), _USB_HELP]


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    """A machine with what squat's examples look for, and some of it twice."""
    h = FakeHost(tmp_path)
    h.add_usb_serial("1-2", ttys=("ttyUSB0",))
    h.add_usb_serial(
        "1-4", ttys=("ttyUSB1",), vendor="1a86", product="7523", driver="ch341", serial=None
    )
    h.add_usb_serial("1-5", ttys=("ttyUSB2",), vendor="1209", product="000f", serial="00000001")
    h.add_usb_serial("1-6", ttys=("ttyUSB3",), vendor="1209", product="000f", serial="00000002")
    h.add_usb_acm("1-3")
    h.add_plain("/dev/video0")
    h.add_plain("/dev/ttyS0", minor=64)
    h.add_misc("fuse")
    h.add_sound_card(0)
    h.add_sound_card(1, pci="0000:00:1f.4")
    return h


def _genericdp_units(text: str, host: FakeHost) -> dict[str, Counter[frozenset[Node]]]:
    config = load_text(text, "<converted>")
    out = {}
    for definition in config.resources:
        counted: Counter[frozenset[Node]] = Counter()
        for unit in discover(definition, host.roots):
            counted[frozenset((n.host_path, n.container_path) for n in unit.nodes)] += (
                definition.count
            )
        out[definition.name] = counted
    return out


def _hosts(units: Counter[frozenset[Node]]) -> Counter[frozenset[str]]:
    return Counter({frozenset(h for h, _c in unit): n for unit, n in units.items()})


@pytest.mark.parametrize("device", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_every_documented_squat_example_serves_the_nodes_squat_serves(
    device: str, host: FakeHost
) -> None:
    """Each --device example squat documents converts to a valid config whose units on a
    fake host hold exactly the nodes squat's own discovery would hand out."""
    result = convert_squat([device])
    parsed = YAML(typ="safe", pure=True).load(device)
    expected = squat_units(host, parsed)
    assert expected, "the fake host must have something for every example"
    (name, got), *_ = _genericdp_units(result.text, host).items()
    assert name == f"squat.ai/{parsed['name']}"
    assert got == expected  # mountPath becomes containerPath: nodes and paths equal


def test_the_whole_manifest_converts_in_one_run() -> None:
    """All of the DaemonSet's --device flags at once give one resource each, in order."""
    result = convert_squat(_manifest_devices())
    config = load_text(result.text, "<converted>")
    assert [r.name for r in config.resources] == [
        "squat.ai/serial",
        "squat.ai/video",
        "squat.ai/fuse",
        "squat.ai/audio",
        "squat.ai/capture",
    ]
    # The capture groups rename their nodes in the container: that is kept or said.
    assert 'containerPath: "/dev/snd/controlC0"  # mountPath' in result.text


def test_a_squat_config_file_converts_like_the_same_flags(tmp_path: Path, host: FakeHost) -> None:
    """squat's --config file (devices, domain) gives the config its flags give."""
    file = tmp_path / "config.yaml"
    file.write_text(
        "domain: example.com\n"
        "devices:\n"
        "  - name: serial\n"
        "    groups:\n"
        "      - paths: [{path: /dev/ttyUSB*}]\n"
        "      - paths: [{path: /dev/ttyACM*}]\n"
        "  - name: ch340\n"
        "    groups: [{usb: [{vendor: '1a86', product: '7523'}], count: 2}]\n"
    )
    from_file = _genericdp_units(convert_squat(config_file=file).text, host)
    from_flags = _genericdp_units(
        convert_squat(
            [
                (
                    "{name: serial, groups: [{paths: [{path: /dev/ttyUSB*}]},"
                    " {paths: [{path: /dev/ttyACM*}]}]}"
                ),
                "{name: ch340, groups: [{usb: [{vendor: '1a86', product: '7523'}], count: 2}]}",
            ],
            domain="example.com",
        ).text,
        host,
    )
    assert from_file == from_flags
    usb = "/dev/bus/usb/001/003"
    assert from_file["example.com/ch340"] == Counter({frozenset({(usb, usb)}): 2})


def test_flags_replace_the_files_devices_and_domain_flag_wins(tmp_path: Path) -> None:
    """As viper resolves them: --device replaces the file's devices, --domain its domain."""
    file = tmp_path / "config.yaml"
    file.write_text(
        "domain: a.example\ndevice:\n  - {name: old, groups: [{paths: [{path: /dev/x}]}]}\n"
    )
    result = convert_squat(
        ['{"name": "new", "groups": [{"paths": [{"path": "/dev/y"}]}]}'], file, "b.example"
    )
    names = [r.name for r in load_text(result.text).resources]
    assert names == ["b.example/new"]
    assert any("its devices are ignored because --device is given" in str(n) for n in result.notes)


def test_mount_paths_become_allocate_mounts_and_what_cannot_be_said_is_noted() -> None:
    """type: Mount is a bind mount (allocate.mounts); globbed mounts and paths outside /dev
    are reported as not converted, in the YAML and in the notes."""
    result = convert_squat(
        [
            (
                '{"name": "gpu", "groups": [{"paths": ['
                '{"path": "/dev/dri/renderD128"},'
                '{"path": "/usr/share/vulkan", "type": "Mount", "readOnly": true},'
                '{"path": "/opt/lib*", "type": "Mount"},'
                '{"path": "/sys/class/drm"}]}]}'
            )
        ]
    )
    definition = load_text(result.text).resources[0]
    mounts = definition.allocate.mounts
    assert [(m.host_path, m.container_path, m.read_only) for m in mounts] == [
        ("/usr/share/vulkan", "/usr/share/vulkan", True)
    ]
    text = "\n".join(str(n) for n in result.notes)
    assert "NOT CONVERTED: Mount path '/opt/lib*'" in text
    assert "NOT CONVERTED: device path '/sys/class/drm'" in text
    assert "NOT CONVERTED: Mount path '/opt/lib*'" in result.text


def test_usb_ids_and_serials_become_exact_udev_attributes() -> None:
    """vendor/product are normalised to sysfs's four lower-case digits, and a serial with
    glob characters still matches only itself."""
    result = convert_squat(
        [
            (
                '{"name": "zb", "groups": [{"usb": [{"vendor": "10C4", "product": "ea60",'
                ' "serial": "a*[1]"}]}]}'
            )
        ]
    )
    matcher = load_text(result.text).resources[0].match[0]
    assert dict(matcher.attributes) == {  # type: ignore[union-attr]
        "idVendor": "10c4",
        "idProduct": "ea60",
        "serial": "a[*][[]1]",
    }


def test_a_bare_number_usb_id_is_read_as_squat_reads_it_and_reported(tmp_path: Path) -> None:
    """squat reads an unquoted 1209 as hex 1209 from a flag, but as decimal 1209 (04b9)
    from its config file; both are converted that way and said."""
    flag = convert_squat(
        ['{"name": "ub", "groups": [{"usb": [{"vendor": 1209, "product": "000f"}]}]}']
    )
    assert 'idVendor: "1209"' in flag.text
    file = tmp_path / "c.yaml"
    file.write_text(
        "devices:\n  - {name: ub, groups: [{usb: [{vendor: 1209, product: '000f'}]}]}\n"
    )
    from_file = convert_squat(config_file=file)
    assert 'idVendor: "04b9"' in from_file.text
    assert any("bare number 1209" in str(n) for n in from_file.notes)


def test_go_globs_become_genericdp_globs() -> None:
    """Go escapes and [^..] classes, and a ** component (one name in Go)."""
    assert go_glob("/dev/tty[^S]*") == "/dev/tty[!S]*"
    assert go_glob(r"/dev/odd\*name") == "/dev/odd[*]name"
    assert go_glob("/dev/**/x") == "/dev/*/x"


@pytest.mark.parametrize(
    "pattern", ["tty[!0]", "tty[!]", "x[!-#]", "x[^!0]", "x[^0]*", "[a-c!]?", "x[!0-9]"]
)
def test_go_classes_match_what_go_matches(pattern: str) -> None:
    """Go's [!0] is the characters ! and 0 (Go negates with ^): the glob matches as Go does."""
    names = ["tty0", "tty1", "tty!", "x!", "x0", "x#", 'x"', "x5", "xa", "b1", "!z", "x", "x00"]
    names += [n.replace("tty", "x") for n in names]
    converted = go_glob("/dev/" + pattern).removeprefix("/dev/")
    for name in names:
        assert fnmatch.fnmatchcase(name, converted) == _go_match(pattern, name), (name, converted)


def test_a_bang_class_is_converted_as_squat_reads_it_and_noted(host: FakeHost) -> None:
    """/dev/ttyS[!0] serves ttyS! and ttyS0 as squat does, not ttyS1, and says why."""
    host.add_plain("/dev/ttyS1", minor=65)
    result = convert_squat(['{"name": "bang", "groups": [{"paths": [{"path": "/dev/ttyS[!0]"}]}]}'])
    served = _genericdp_units(result.text, host)["squat.ai/bang"]
    assert {h for unit in _hosts(served) for h in unit} == {"/dev/ttyS0"}
    assert any("not a negation" in str(n) and "[0!]" in str(n) for n in result.notes), result.notes
    assert "not a negation" in result.text  # the NOTE comment in the YAML


def test_group_keys_tell_groups_apart_or_give_up() -> None:
    """The derived pathRegex gives each group one key; with no distinguishing key, None."""
    regex = group_regex([["/dev/a1", "/dev/b1"], ["/dev/a2", "/dev/b2"]])
    assert regex == "(1|2)"
    assert group_regex([["/dev/a", "/dev/b"], ["/dev/a", "/dev/c"]]) is None


def test_group_keys_of_long_paths_are_found_in_linear_time() -> None:
    """2,000-character paths (a hostile config) get their keys in well under a second."""
    # What the groups share is long, what tells them apart short: every length is tried.
    long = "ab" * 1000
    groups = [[f"/dev/{long}-{i}", f"/dev/-{i}{long}"] for i in range(3)]
    started = time.monotonic()
    regex = group_regex(groups)
    assert time.monotonic() - started < 2.0
    assert regex is not None
    for i, paths in enumerate(groups):
        for path in paths:
            found = re.search(regex, path)
            assert found is not None
            assert found[1] == f"-{i}"


def test_groups_genericdp_cannot_group_are_flagged_not_equivalent() -> None:
    """A glob group next to a multi-path group has no groupBy twin: it is said loudly."""
    result = convert_squat(
        [
            (
                '{"name": "mix", "groups": [{"paths": [{"path": "/dev/ttyUSB*"}]},'
                ' {"paths": [{"path": "/dev/a"}, {"path": "/dev/b"}]}]}'
            )
        ]
    )
    assert "NOT EQUIVALENT" in result.text
    load_text(result.text)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("{name: x, groups: [", "--device #1:1:20: YAML syntax error"),
        ('{"name": "X", "groups": []}', "--device #1:1:10: name: name 'X' must match"),
        (
            (
                '{"name": "ab", "groups": [{"paths": [{"path": "/dev/a"}],'
                ' "usb": [{"vendor": "1", "product": "2"}]}]}'
            ),
            "--device #1:1:27: groups[0]: a group cannot have both paths and usb",
        ),
        (
            '{"name": "ab", "groups": [{"paths": [{"path": "/dev/a", "type": "mount"}]}]}',
            "--device #1:1:65: groups[0].paths[0].type: type 'mount' must be Device or Mount",
        ),
        (
            '{"name": "ab", "groups": [{"usb": [{"vendor": "xyz", "product": "2"}]}]}',
            "groups[0].usb[0].vendor: 'xyz' is not a USB ID",
        ),
        (
            '{"name": "ab", "groups": [{"count": -1, "paths": [{"path": "/dev/a"}]}]}',
            "groups[0].count: must be a whole number",
        ),
        (
            '{"name": "ab", "groups": [{"paths": [{"path": "/dev/a["}]}]}',
            "--device #1:1:47: groups[0].paths[0].path: '/dev/a[' is not a valid Go glob",
        ),
        (
            '{"name": "ab", "groups": [{"paths": [{"path": 5}]}]}',
            "groups[0].paths[0].path: must be a string, not the number 5",
        ),
    ],
)
def test_bad_flags_say_which_flag_where_and_what(device: str, expected: str) -> None:
    """A bad --device value is refused with its flag number, line, column and key."""
    with pytest.raises(ConfigError) as caught:
        convert_squat(["{name: ok, groups: [{paths: [{path: /dev/a}]}]}", device][1:])
    assert any(str(i).startswith(expected) or expected in str(i) for i in caught.value.issues), [
        str(i) for i in caught.value.issues
    ]


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        (
            '{"name": "ab", "groups": !foo [{"paths": [{"path": "/dev/a"}]}]}',
            "--device #1:1:26: groups: the YAML tag !foo is not supported here",
        ),
        (
            '{"name": "ab", "groups": !!omap [{"paths": [{"path": "/dev/a"}]}]}',
            "--device #1:1:26: groups: must be a list of groups, not a mapping",
        ),
        (
            '{"name": "ab", "groups": [{"count": 1' + "0" * 5000 + "}]}",
            "--device #1:1:37: groups[0].count: a number of 5001 digits is far too large",
        ),
        (
            '{"name": "ab", "groups": [{"count": 0x' + "f" * 4000 + "}]}",
            "--device #1:1:37: groups[0].count: a number of 16000 bits is far too large",
        ),
        (
            '{"name": "ab", "groups": [{"count": !!int abc}]}',
            "--device #1:1:37: groups[0].count: !!int 'abc' is not a valid int",
        ),
        ('{"name": "ab", !!pairs [{a: 1}]: 1}', "--device #1:1:16: a key must be a string"),
    ],
)
def test_yaml_tags_and_huge_numbers_are_refused_where_they_are(
    device: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tagged collections, unreadable tagged scalars and numbers of thousands of digits
    are refused at --device #N:line:column with their key, never a traceback."""
    assert main(["convert", "--device", device]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert f"error: {expected}" in err, err
    assert "Traceback" not in err


def test_the_flag_number_counts_every_device_flag() -> None:
    """The second of two --device flags is "--device #2"."""
    with pytest.raises(ConfigError) as caught:
        convert_squat(["{name: ok, groups: [{paths: [{path: /dev/a}]}]}", "{name: 1}"])
    assert str(caught.value.issues[0]).startswith("--device #2:1:8: name:")


def test_a_bad_config_file_is_located_by_file_line_and_column(tmp_path: Path) -> None:
    """Errors in squat's file name the file, the line and the column."""
    file = tmp_path / "squat.yaml"
    file.write_text("devices:\n  - name: ok\n    groups:\n      - count: many\n")
    with pytest.raises(ConfigError) as caught:
        convert_squat(config_file=file)
    assert str(caught.value.issues[0]) == (
        f"{file}:4:16: devices[0].groups[0].count: must be a whole number of at least 0,"
        " not the string 'many'"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: &a [1]\n"
            + "".join(
                f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                for p, c in zip("abcdefghi", "bcdefghij", strict=True)
            )
            + "devices: *j\n",
            "alias bomb",
        ),
        ("devices: " + "[" * 200 + "]" * 200 + "\n", "nested"),
        ("devices: [{name: x}]\n# " + "c" * 5000 + "\n", "comment"),
    ],
)
def test_hostile_files_are_refused_as_configs_are(tmp_path: Path, text: str, expected: str) -> None:
    """Alias bombs, deep nesting and giant comments meet config loading's limits."""
    file = tmp_path / "squat.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        convert_squat(config_file=file)
    assert expected in str(caught.value).lower() or expected in str(caught.value)


def test_huge_inputs_and_odd_files_are_refused(tmp_path: Path) -> None:
    """A file over 1 MiB, a FIFO and a --device value over 1 MiB are refused, not read."""
    big = tmp_path / "big.yaml"
    big.write_text("#" * (1024 * 1024 + 1))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    for path, what in ((big, "limit of 1048576 bytes"), (fifo, "FIFO")):
        with pytest.raises(ConfigError) as caught:
            convert_squat(config_file=path)
        assert what in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        convert_squat(["x" * (1024 * 1024 + 1)])
    assert "--device #1: is larger than 1 MiB" in str(caught.value)


def test_cli_prints_yaml_on_stdout_and_differences_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 0, the YAML on stdout (or --output), one warning line per difference."""
    device = (
        '{"name": "serial", "groups": [{"paths": [{"path": "/dev/ttyUSB*",'
        ' "mountPath": "/dev/serial/"}], "cnt": 2}]}'
    )
    assert main(["convert", "--device", device]) == EXIT_OK
    out, err = capsys.readouterr()
    load_text(out)
    assert "warning: --device #1:1:98: groups[0].cnt: unknown key 'cnt', which squat ignores" in err
    mount_note = "warning: --device #1:1:42: groups[0].paths[0]: mountPath '/dev/serial/'"
    assert mount_note not in err
    target = tmp_path / "out.yaml"
    assert main(["convert", "--device", device, "-o", str(target)]) == EXIT_OK
    assert load_text(target.read_text()).resources[0].name == "squat.ai/serial"


def test_cli_exits_4_when_part_of_squats_config_is_not_converted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The YAML is still written, but a device path genericdp cannot serve makes it exit 4."""
    device = (
        '{"name": "part", "groups": [{"paths": [{"path": "/dev/ttyUSB*"}]},'
        ' {"paths": [{"path": "/sys/class/drm"}]}]}'
    )
    target = tmp_path / "out.yaml"
    assert main(["convert", "--device", device, "-o", str(target)]) == EXIT_FAILED
    assert load_text(target.read_text()).resources[0].name == "squat.ai/part"
    err = capsys.readouterr().err
    assert "NOT CONVERTED: device path '/sys/class/drm'" in err
    assert err.rstrip().endswith(
        "error: 2 part(s) of squat's config NOT CONVERTED: the config serves less than"
        " squat does (see the warnings)"
    )
    with pytest.raises(SystemExit):
        main(["convert", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "Exits 0 when everything converted, 1 on invalid input, and 4 when" in shown


def test_cli_exit_codes_for_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Nothing given is a usage error (2); a bad value or a missing file is invalid input (1)."""
    assert main(["convert"]) == EXIT_USAGE
    assert main(["convert", "--device", "{name: x}"]) == EXIT_INVALID
    assert main(["convert", "--config", str(tmp_path / "missing.yaml")]) == EXIT_INVALID
    assert (
        main(
            [
                "convert",
                "--device",
                "{name: ok, groups: [{paths: [{path: /dev/a}]}]}",
                "--domain",
                "Bad_Domain",
            ]
        )
        == EXIT_INVALID
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "missing.yaml: cannot be read: No such file or directory" in err
    assert "--domain: domain: 'Bad_Domain' is not a DNS subdomain" in err


def test_squats_daemon_flags_are_accepted_and_named_in_genericdp_terms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pasted args list with --plugin-directory, --listen and --log-level converts; each
    flag becomes a NOTE naming genericdp's setting."""
    device = "{name: fuse, groups: [{paths: [{path: /dev/fuse/}]}]}"
    args = ["--device", device, "--plugin-directory", "/x", "--listen", ":9090"]
    assert main(["convert", *args, "--log-level", "debug"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "# NOTE: --plugin-directory '/x': genericdp's is GENERICDP_PLUGIN_DIR" in out
    assert "warning: --listen ':9090': squat's metrics and health address" in err
    assert "warning: --log-level 'debug'" in err
    assert "- glob: /dev/fuse  #" in out  # squat's glob names the directory without the '/'


def test_a_hostile_device_flag_meets_the_config_limits() -> None:
    """An alias bomb in a --device value is refused as one in a config file would be."""
    bomb = "a: &a [1]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefghi", "bcdefghij", strict=True)
    )
    with pytest.raises(ConfigError) as caught:
        convert_squat([bomb + "name: *j\n"])
    assert str(caught.value).startswith("--device #1:")
    assert "alias bomb" in str(caught.value)


def test_a_newline_in_a_file_name_cannot_write_yaml_into_the_output(tmp_path: Path) -> None:
    """Sources and keys reach comments only as one printable line."""
    file = tmp_path / "squat\nresources: []\n#.yaml"
    file.write_text("devices: [{name: aa, groups: [{paths: [{path: /dev/a}]}], 'x\\ny': 1}]\n")
    result = convert_squat(config_file=file)
    assert [r.name for r in load_text(result.text).resources] == ["squat.ai/aa"]
    assert "\nresources: []" not in result.text


def test_a_mount_path_genericdp_cannot_give_is_said() -> None:
    """A mountPath outside /dev keeps the node at its host path, with a NOTE."""
    result = convert_squat(
        ['{"name": "ab", "groups": [{"paths": [{"path": "/dev/a", "mountPath": "/tmp/a"}]}]}']
    )
    notes = "\n".join(str(n) for n in result.notes)
    assert "NOT CONVERTED: mountPath '/tmp/a'" in notes
    assert "containerPath" not in result.text
    load_text(result.text)
