"""What the e2e scripts import from genericdp (inside the image, with `python3 -c`) exists.

A shell script's Python is not seen by ruff, mypy or the name checks of test_layers.py: a
name renamed in src/ would fail only in the e2e, after the image is built and a node is up.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"from (genericdp[\w.]*) import ([\w, ]+)")


def imports_of_scripts(root: Path) -> dict[tuple[str, str], list[str]]:
    """(module, name) -> the scripts under ``root`` that import it."""
    found: dict[tuple[str, str], list[str]] = {}
    for script in sorted(root.rglob("*.sh")):
        for module, names in IMPORT.findall(script.read_text()):
            for name in names.split(","):
                found.setdefault((module, name.strip()), []).append(str(script.relative_to(root)))
    return found


def test_every_name_the_e2e_scripts_import_exists() -> None:
    """Each `from genericdp... import name` in e2e/**/*.sh resolves against src/."""
    found = imports_of_scripts(ROOT / "e2e")
    assert found, "the e2e scripts import something from genericdp"
    missing = [
        f"{module}.{name} ({', '.join(scripts)})"
        for (module, name), scripts in found.items()
        if not hasattr(importlib.import_module(module), name)
    ]
    assert missing == []


def test_the_scan_finds_an_import_in_a_script(tmp_path: Path) -> None:
    """The scan sees imports in inline Python of any script, several names on a line."""
    (tmp_path / "a.sh").write_text(
        "python3 -c 'import sys; from genericdp.config.names import a, b; print(a)'\n"
    )
    assert imports_of_scripts(tmp_path) == {
        ("genericdp.config.names", "a"): ["a.sh"],
        ("genericdp.config.names", "b"): ["a.sh"],
    }
