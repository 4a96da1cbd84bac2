"""What the docs quote genericdp saying is what it says.

docs/troubleshooting.md quotes config errors as ``error: config.yaml:L:C: ...``;
each must be what loading one of tests/broken/ reports, at that line and
column. Its log lines must come from a message the daemon's code logs. And
docs/quickstart.md quotes ``genericdp validate`` of the demo config.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from genericdp.config import load
from genericdp.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
BROKEN = sorted((REPO / "tests" / "broken").glob("*.yaml"))
SRC = REPO / "src" / "genericdp"
_TEXT_BLOCK = re.compile(r"^```text\n(.*?)^```", re.DOTALL | re.MULTILINE)
_QUOTED_ERROR = re.compile(r"error: config\.yaml:(?P<where>\d+:\d+: .+)")
_LOG_LINE = re.compile(r"(?:debug|info|warning|error)\s+genericdp\.[\w.]+: (?P<message>.+)")


def _text_lines(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return [line for block in _TEXT_BLOCK.findall(text) for line in block.splitlines()]


@cache
def _reported() -> list[str]:
    """Every issue the broken corpus reports, as ``line:column: path: message``."""
    found: list[str] = []
    for case in BROKEN:
        with pytest.raises(ConfigError) as caught:
            load([case])
        for issue in caught.value.issues:  # the docs call every file config.yaml
            found.append(str(issue).replace(str(case), "config.yaml").removeprefix("config.yaml:"))
    return found


QUOTED_ERRORS = [
    m["where"] for line in _text_lines("troubleshooting.md") if (m := _QUOTED_ERROR.fullmatch(line))
]


def test_the_page_quotes_config_errors_and_log_lines() -> None:
    assert len(QUOTED_ERRORS) >= 30
    assert QUOTED_LOGS


@pytest.mark.parametrize("quoted", QUOTED_ERRORS)
def test_a_quoted_config_error_is_what_validate_reports(quoted: str) -> None:
    assert any(reported.startswith(quoted) for reported in _reported()), quoted


def _log_formats() -> list[re.Pattern[str]]:
    """The daemon's log formats (``"... %s ..."`` literals, joined), as patterns."""
    formats = []
    for path in SRC.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        for call in re.finditer(r"log\.(?:warning|error|info)\(\s*((?:\"[^\"]*\"\s*)+)", source):
            literal = "".join(re.findall(r"\"([^\"]*)\"", call.group(1)))
            parts = re.split(r"%(?:\.\d+)?[sdfr]", literal)
            formats.append(re.compile(".+".join(re.escape(part) for part in parts)))
    return formats


QUOTED_LOGS = [
    m["message"] for line in _text_lines("troubleshooting.md") if (m := _LOG_LINE.search(line))
]


@pytest.mark.parametrize("quoted", QUOTED_LOGS)
def test_a_quoted_log_line_is_one_the_daemon_logs(quoted: str) -> None:
    assert any(f.fullmatch(quoted) for f in _log_formats()), quoted


def test_the_quick_start_quotes_validate_as_it_prints() -> None:
    blocks = [b for b in _TEXT_BLOCK.findall((DOCS / "quickstart.md").read_text()) if "ok:" in b]
    assert len(blocks) == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    done = subprocess.run(
        [sys.executable, "-m", "genericdp", "validate", "configs/examples/demo.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == blocks[0]
