"""The hostile-config corpus: inputs written to hurt, refused in bounded time and memory.

Each file in tests/hostile/config/ is one attack; its first line says where
the one issue must be reported and what it must say, as in tests/broken/.
Inputs that cannot live in git (FIFOs, device links, oversized files) are
made here. ``test_reload_hostile.py`` feeds the same corpus to a running daemon.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from genericdp.config import load, load_text
from genericdp.config.limits import MAX_RESOURCES
from genericdp.config.loader import MAX_FILE_BYTES, MAX_ISSUES_PER_FILE
from genericdp.config.yamldepth import MAX_COMMENT_CHARS
from genericdp.config.yamlpos import parse_yaml
from genericdp.errors import ConfigError, ConfigIssue

HOSTILE = Path(__file__).parent / "hostile" / "config"
EXPECT = re.compile(r"# expect: (?P<line>\d+):(?P<column>\d+): (?P<text>.+)")
CASES = sorted(HOSTILE.glob("*.yaml"))
GOOD = "version: v1\nresources:\n  - name: example.com/null\n    match: [glob: /dev/null]\n"

MAX_SECONDS = 2.0
MAX_RSS_GROWTH = 50 * 1024 * 1024


def expectation(case: Path) -> tuple[int, int, str]:
    found = EXPECT.fullmatch(case.read_text(encoding="utf-8").splitlines()[0])
    assert found, f"{case.name}: first line must be '# expect: <line>:<col>: <text>'"
    return int(found["line"]), int(found["column"]), found["text"]


# A hang detector, not a speed limit: a tracer (./dev coverage, a
# debugger) makes the pure-Python YAML parser about five times slower.
HANG_SECONDS = 10 * (5 if sys.gettrace() is not None else 1)


def issues_of(*paths: Path) -> tuple[ConfigIssue, ...]:
    """The issues of loading ``paths``, from a thread: a regression that blocks
    (a FIFO) fails this test in seconds instead of hanging the run."""
    outcome: list[BaseException | object] = []
    thread = threading.Thread(target=lambda: outcome.append(_load(paths)), daemon=True)
    thread.start()
    thread.join(HANG_SECONDS)
    assert outcome, f"loading {paths} did not finish within {HANG_SECONDS} s"
    assert isinstance(outcome[0], ConfigError), f"not refused: {outcome[0]!r}"
    return outcome[0].issues


def _load(paths: tuple[Path, ...]) -> BaseException | object:
    try:
        return load(paths)
    except Exception as exc:  # noqa: BLE001 -- whatever load raises is the result compared
        return exc


def test_corpus_covers_every_class() -> None:
    """The corpus keeps a case for each attack class of issue 7."""
    names = {case.stem.split("-")[0] for case in CASES}
    assert {"alias", "flow", "nul", "glob", "health", "hook", "mount", "regex", "template"} <= names


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_hostile_config_is_refused_at_its_position(case: Path) -> None:
    """Each hostile file yields exactly one issue, at file:line:column, saying what is wrong."""
    line, column, text = expectation(case)
    (issue,) = issues_of(case)
    assert (issue.file, issue.line, issue.column) == (str(case), line, column), str(issue)
    assert text in str(issue)


# Runs in a child with its address space limited: validates each case in turn
# and reports, per case, the exit code, the time and the growth of peak RSS.
MEASURE = """
import contextlib, io, json, resource, sys, time
from genericdp import cli
import genericdp.config, genericdp.allocation.render  # imports are not what is measured
with open("/proc/self/status") as status:
    vm = next(int(l.split()[1]) for l in status if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), vm + (1 << 30)))
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
for path in sys.argv[1:]:
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["validate", path])
    seconds = time.monotonic() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"path": path, "code": code, "seconds": seconds,
                      "growth": peak - baseline, "stderr": err.getvalue()}))
"""


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, *map(str, CASES)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    return {str(row["path"]): row for row in rows}


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_validate_refuses_in_bounded_time_and_memory(
    case: Path, measured: dict[str, dict[str, object]]
) -> None:
    """`genericdp validate` exits 1 with file:line:column, in under 2 s and 50 MB of RSS."""
    line, column, _ = expectation(case)
    row = measured[str(case)]
    assert row["code"] == 1, row
    assert f"{case}:{line}:{column}: " in str(row["stderr"])
    assert "Traceback" not in str(row["stderr"])
    assert float(str(row["seconds"])) < MAX_SECONDS, row
    assert int(str(row["growth"])) < MAX_RSS_GROWTH, row


# -- what cannot be a file in git -------------------------------------------------------


def test_fifo_in_the_config_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named like a config file is refused at once (reading it used to block forever)."""
    (tmp_path / "a.yaml").write_text(GOOD)
    os.mkfifo(tmp_path / "b.yaml")
    (issue,) = issues_of(tmp_path)
    assert issue.file == str(tmp_path / "b.yaml")
    assert "is a FIFO (named pipe), not a regular file" in issue.message


def test_fifo_given_as_the_config_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO passed as the config path itself is refused the same way."""
    os.mkfifo(tmp_path / "config.yaml")
    (issue,) = issues_of(tmp_path / "config.yaml")
    assert "is a FIFO (named pipe)" in issue.message


def test_link_to_a_device_is_refused(tmp_path: Path) -> None:
    """A link to /dev/zero (endless) is refused as a device, not read."""
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (issue,) = issues_of(tmp_path)
    assert issue.file == str(tmp_path / "zero.yaml")
    assert "is a character device, not a regular file" in issue.message


def test_socket_is_refused(tmp_path: Path) -> None:
    """A unix socket named like a config file is refused."""
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        (issue,) = issues_of(tmp_path)
    assert "is a socket or FIFO, not a regular file" in issue.message


def test_file_over_a_configmaps_size_is_refused(tmp_path: Path) -> None:
    """A file of more than 1 MiB is refused before it is parsed; 1 MiB exactly is read."""
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    (issue,) = issues_of(path)
    assert f"has {MAX_FILE_BYTES + 1} bytes, more than the limit of {MAX_FILE_BYTES}" in (
        issue.message
    )
    path.write_bytes((b"#" * 63 + b"\n") * (MAX_FILE_BYTES // 64))
    (issue,) = issues_of(path)
    assert "only comments" in issue.message


def test_a_comment_too_long_for_the_parser_is_refused_at_its_position(tmp_path: Path) -> None:
    """One comment line of 1 MiB took ruamel 16-20 s (quadratic); it is refused before
    parsing, at its position, in milliseconds."""
    path = tmp_path / "comment.yaml"
    path.write_text(GOOD + "  # " + "x" * (MAX_FILE_BYTES - len(GOOD) - 8) + "\n")
    started = time.process_time()
    (issue,) = issues_of(path)
    assert time.process_time() - started < 0.5
    assert (issue.line, issue.column) == (GOOD.count("\n") + 1, 3)
    assert f"at most {MAX_COMMENT_CHARS}" in issue.message


def test_raw_nul_byte_is_refused_at_its_position(tmp_path: Path) -> None:
    """A NUL byte in the file itself is a located syntax error."""
    path = tmp_path / "nul.yaml"
    path.write_bytes(GOOD.replace("/dev/null", "/dev/nu\0ll").encode())
    (issue,) = issues_of(path)
    assert (issue.line, issue.column) == (4, 26)
    assert "U+0000" in issue.message


def test_deep_block_nesting_is_refused_at_its_position(tmp_path: Path) -> None:
    """Block nesting too deep for the parser (``- - - ... x``) is refused where it gets
    too deep, not with a traceback."""
    path = tmp_path / "deep.yaml"
    path.write_text("version: v1\nresources:\n" + "- " * 5000 + "x\n")
    (issue,) = issues_of(path)
    assert (issue.line, issue.column) == (3, 127)
    assert "nested more than 64 deep here" in issue.message


def test_long_template_is_refused_before_it_is_compiled(tmp_path: Path) -> None:
    """A template source over 16 KiB is refused at its value, in well under a second
    (compiling 780 KB of template took 22 s)."""
    path = tmp_path / "long.yaml"
    path.write_text(
        GOOD + '    allocate:\n      env:\n        V: "' + "{{ devices }}" * 6000 + '"\n'
    )
    started = time.monotonic()
    (issue,) = issues_of(path)
    assert time.monotonic() - started < MAX_SECONDS
    assert (issue.line, issue.column) == (7, 12)
    assert "is 78000 characters long; at most 16384 are allowed" in issue.message


def test_issues_per_file_are_capped_with_a_count(tmp_path: Path) -> None:
    """A file with 400 problems reports the first 100 and counts the other 300, located."""
    path = tmp_path / "many.yaml"
    path.write_text(
        "version: v1\nresources:\n"
        + "".join(
            f"- {{name: example.com/r{i}, match: [glob: /dev/x], bad: 1}}\n" for i in range(400)
        )
    )
    issues = issues_of(path)
    assert len(issues) == MAX_ISSUES_PER_FILE + 1
    summary = issues[-1]
    assert summary.message.startswith("… and 300 more problem(s) in this file")
    assert summary.line == MAX_ISSUES_PER_FILE + 3


def test_more_resources_than_the_memory_limit_holds_are_refused_with_the_number(
    tmp_path: Path,
) -> None:
    """6,000 valid resources (300 KB) served at 360 MiB, over the DaemonSet's 256 MiB:
    refused at the first resource over the limit, across files, with both numbers."""
    for part in range(2):
        (tmp_path / f"part{part}.yaml").write_text(
            "version: v1\nresources:\n"
            + "".join(
                f"- {{name: example.com/r{part}-{i}, match: [glob: /dev/x]}}\n"
                for i in range(MAX_RESOURCES // 2 + part)
            )
        )
    (issue,) = issues_of(tmp_path)
    assert (issue.file, issue.line) == (str(tmp_path / "part1.yaml"), MAX_RESOURCES // 2 + 3)
    assert f"defines {MAX_RESOURCES + 1} resources, more than the {MAX_RESOURCES}" in str(issue)
    (tmp_path / "part1.yaml").write_text(
        "version: v1\nresources:\n"
        + "".join(
            f"- {{name: example.com/r1-{i}, match: [glob: /dev/x]}}\n"
            for i in range(MAX_RESOURCES // 2)
        )
    )
    assert len(load([tmp_path]).resources) == MAX_RESOURCES  # the limit itself is valid


def test_validation_time_is_linear_in_the_number_of_problems() -> None:
    """Checking costs a bounded multiple of parsing, however many resources are wrong
    (it grew with the square of the problems: every resource scanned every problem).
    CPU time of this process, so other work on the machine counts little."""
    text = "version: v1\nresources:\n" + "".join(
        f"- {{name: example.com/r{i}, match: [glob: /dev/x], bad: 1}}\n" for i in range(2000)
    )
    started = time.process_time()
    parse_yaml(text, "many.yaml")
    parsing = time.process_time() - started
    started = time.process_time()
    with pytest.raises(ConfigError):
        load_text(text, "many.yaml")
    checking = time.process_time() - started
    assert checking < 1.7 * parsing, (checking, parsing)


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a|aa)+$", "(.*a){12}$", "((a*)*)*b"])
def test_backtracking_patterns_match_in_linear_time(pattern: str) -> None:
    """Patterns that make a backtracking engine run for hours match at once (RE2)."""
    from genericdp.config.regex import compile_regex

    regex = compile_regex(pattern)
    started = time.monotonic()
    assert regex.search("a" * 50_000 + "!") is None
    assert time.monotonic() - started < 0.5


def test_grouping_by_a_backtracking_pattern_is_fast() -> None:
    """groupBy.pathRegex meeting a long device name groups at once (it froze the daemon)."""
    from genericdp.config.model import GroupBy
    from genericdp.discovery.grouping import group_nodes
    from genericdp.discovery.model import DeviceNode

    path = "/dev/" + "a" * 50_000 + "!"
    nodes = [DeviceNode(path, path), DeviceNode("/dev/aa", "/dev/aa")]
    started = time.monotonic()
    groups = group_nodes(nodes, GroupBy("pathRegex", pattern="/dev/(?P<key>(a|aa)+)$"), Path("/"))
    assert time.monotonic() - started < 0.5
    assert [(g.key, [n.host_path for n in g.nodes]) for g in groups] == [("aa", ["/dev/aa"])]
