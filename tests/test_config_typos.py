"""Near-misses the config accepts and the typos it refuses (the refusals
themselves are in tests/broken/, one file each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genericdp.config import load
from genericdp.config.devpaths import glob_problem


@pytest.mark.parametrize(
    "group_by", ["parent:usb", "parent:nvmem", "parent:hidraw", "parent:mybus"]
)
def test_a_subsystem_not_close_to_a_common_one_is_accepted(tmp_path: Path, group_by: str) -> None:
    """Only a name one letter or so from a common subsystem is taken for a typo."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nresources:\n  - name: example.com/serial\n"
        f"    groupBy: {group_by}\n    match:\n      - glob: /dev/ttyUSB*\n"
    )
    assert load([cfg]).resources


@pytest.mark.parametrize(
    ("pattern", "refused"),
    [
        ("/dev/ttyUSB[0-9]", False),
        ("/dev/ttyUSB[!0]", False),
        ("/dev/x[]]", False),
        ("/dev/x[[]", False),
        ("/dev/ttyUSB[0-", True),
        ("/dev/[abc/ttyS0", True),
        ("/dev/ttyUSB[0-9]x[", True),
    ],
)
def test_an_unclosed_bracket_in_a_glob_is_refused(pattern: str, *, refused: bool) -> None:
    """A '[' never closed would match itself literally: never what was meant."""
    assert (glob_problem(pattern) is not None) is refused
