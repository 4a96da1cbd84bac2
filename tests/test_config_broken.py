"""The broken-config corpus: each file in tests/broken/ has one defect, and its
first line says where the one issue must be reported and what it must say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genericdp.config import load
from genericdp.errors import ConfigError

BROKEN = Path(__file__).parent / "broken"
EXPECT = re.compile(r"# expect: (?P<line>\d+)(?::(?P<column>\d+))?: (?P<text>.+)")
CASES = sorted(BROKEN.glob("*.yaml"))


def test_corpus_is_large_enough() -> None:
    """The corpus keeps at least 30 broken configs."""
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_broken_config_reports_one_located_issue(case: Path) -> None:
    """A broken config yields exactly one issue, at the expected place, saying what is wrong."""
    expect = EXPECT.fullmatch(case.read_text(encoding="utf-8").splitlines()[0])
    assert expect, f"{case.name}: first line must be '# expect: <line>[:<col>]: <text>'"
    with pytest.raises(ConfigError) as caught:
        load([case])
    issues = caught.value.issues
    assert len(issues) == 1, "\n".join(str(i) for i in issues)
    issue = issues[0]
    assert issue.file == str(case)
    assert issue.line == int(expect["line"]), str(issue)
    if expect["column"]:
        assert issue.column == int(expect["column"]), str(issue)
    assert expect["text"] in issue.message, str(issue)
    assert case.name in str(caught.value)
