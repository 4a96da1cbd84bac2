"""The user docs (README.md, docs/*.md) say what is, not how it came to be.

Development history (issue numbers, branches, who measured what, files that
are not in the repository) belongs in git and CHANGELOG.md. A page that names
them reads as a lab notebook and goes stale with the next change.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# Each pattern names one kind of history; matched case-insensitively.
HISTORY = {
    "an issue of this project": r"\bissues? #?\d+",
    "a development branch": r"\bbranch(es)? (`|of\b|named\b)",
    "who did the work": r"\bengineers?\b|\bthe lead\b",
    "a design file not in the repository": r"\b(DESIGN|STYLE)\.md\b",
    "a work session": r"\bsessions?\b",
}

# "session" is also a process session (setsid) and pytest's fixture scope:
# those uses, spelt exactly, are not history.
SESSION_SENSES = (
    "a session of its own",
    "runs in a new session",
    "gets a session",
    "leave the session",
    "the session fixture",
    "shared by the session",
)


def history_in(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the text matched) for each mention of development history."""
    found = []
    flat = re.sub(r"\s+", " ", text)
    for what, pattern in HISTORY.items():
        for match in re.finditer(pattern, flat, re.IGNORECASE):
            if what == "a work session" and _process_session(flat, match):
                continue
            line = _line_of(text, flat, match.start())
            found.append((line, what, match.group(0)))
    return sorted(found)


def _process_session(flat: str, match: re.Match[str]) -> bool:
    around = flat[max(0, match.start() - 30) : match.end() + 30].lower()
    return any(sense in around for sense in SESSION_SENSES)


def _line_of(text: str, flat: str, offset: int) -> int:
    """The line of ``text`` holding the ``offset``-th character of its flattened form."""
    words_before = len(flat[:offset].split())
    words = 0
    for number, line in enumerate(text.splitlines(), 1):
        words += len(line.split())
        if words > words_before:
            return number
    return len(text.splitlines())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_page_tells_no_development_history(page: Path) -> None:
    found = history_in(page.read_text())
    where = [f"{page.relative_to(REPO)}:{line}: {what}: {text!r}" for line, what, text in found]
    assert where == [], "development history belongs in git and CHANGELOG.md:\n" + "\n".join(where)


@pytest.mark.parametrize(
    "text",
    [
        "after issue 10's second round, load average 1",
        "the branches of issue 12 merged, then main",
        "measured on branch `alloc` against main",
        "while seven other engineers ran test suites",
        "not done: the lead's call",
        "the targets of DESIGN.md",
        "see STYLE.md",
        "as measured in an earlier\nsession of the project",
    ],
)
def test_history_is_found(text: str) -> None:
    assert history_in(text) != []


@pytest.mark.parametrize(
    "text",
    [
        "even a process a hook started in a session of its own",
        "Each command runs in a new session and its own process group",
        "the session fixture `apiserver`",
        "Each command gets a session\nand a process group; what tries to leave the session",
        "3. On a branch: bump the version",
        "kubernetes/kubernetes#132028 (merged in 2025)",
        "every issue located in the file",
    ],
)
def test_present_tense_is_not_history(text: str) -> None:
    assert history_in(text) == []


def test_the_line_is_the_one_that_holds_the_words() -> None:
    text = "one two\nthree issue\n12 four\n"
    assert history_in(text) == [(2, "an issue of this project", "issue 12")]
