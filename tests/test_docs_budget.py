"""The user docs stay readable in an evening, and apart from the contributor docs.

The user pages are README.md and docs/*.md: what a user needs to install,
configure and run genericdp. How it is built, tested, measured and released
is for contributors and lives under docs/contributing/, outside the budget.
A user page carries no lab notes: the machine a figure was measured on, its
load, paths outside the repository. Figures live once, in
docs/contributing/performance.md, with their machine; user pages link there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
USER_PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
CONTRIBUTOR_PAGES = ("architecture.md", "testing.md", "performance.md", "releasing.md")

# Words as `wc -w` counts them: runs of non-blank characters.
USER_BUDGET = 20_000
README_BUDGET = 1_500

# Each names one kind of lab note; matched case-insensitively.
LAB_NOTES = {
    "the machine something ran on": r"\bCI machine\b|\b(on|of) these machines\b",
    "a machine's load": r"\bload average\b|\bload \d|\bcores shared\b|\bshared cores\b",
    "a path outside the repository": r"\.\./shared\b",
    "the CI's own script": r"\.ci/run\b",
}


def words(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").split())


def lab_notes_in(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the text matched) for each lab note."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for what, pattern in LAB_NOTES.items():
            found += [(number, what, m[0]) for m in re.finditer(pattern, line, re.IGNORECASE)]
    return found


def test_the_user_pages_fit_the_budget() -> None:
    """README.md and docs/*.md together: at most USER_BUDGET words."""
    counts = {str(p.relative_to(REPO)): words(p) for p in USER_PAGES}
    total = sum(counts.values())
    biggest = sorted(counts.items(), key=lambda item: -item[1])
    assert total <= USER_BUDGET, f"{total} words in the user pages, over {USER_BUDGET}: {biggest}"


def test_the_readme_is_short() -> None:
    """The README shows the product and links the rest: at most README_BUDGET words."""
    assert words(REPO / "README.md") <= README_BUDGET


def test_the_contributor_pages_are_under_contributing() -> None:
    """Architecture, testing, performance and releasing are for contributors, not beside
    the user pages."""
    for name in CONTRIBUTOR_PAGES:
        assert (DOCS / "contributing" / name).is_file(), name
        assert not (DOCS / name).exists(), f"docs/{name} belongs under docs/contributing/"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_user_page_has_no_lab_notes(page: Path) -> None:
    found = lab_notes_in(page.read_text(encoding="utf-8"))
    where = [f"{page.relative_to(REPO)}:{line}: {what}: {text!r}" for line, what, text in found]
    assert not where, "move it to docs/contributing/ and link there:\n" + "\n".join(where)


def test_the_lab_note_patterns_catch_what_they_name() -> None:
    """Each pattern finds the note it is for and passes ordinary prose."""
    noted = (
        "On the CI machine (2 shared cores, load average 6-8)\n"
        "a fact of these machines\n"
        "binaries from ../shared/k8s/\n"
        "`.ci/run` runs the suite\n"
    )
    assert {what for _, what, _ in lab_notes_in(noted)} == set(LAB_NOTES)
    assert lab_notes_in("The machine loads the config; a shared device; CI runs it.") == []
