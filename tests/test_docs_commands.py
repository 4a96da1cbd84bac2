"""The genericdp commands the docs show, in their ``sh`` blocks, run and exit 0.

A command is run when it needs nothing but this repository: its file
arguments exist here (``configs/examples/demo.yaml``), or it reads only its
flags (``convert --device ...``). Commands on placeholders (``my.yaml``,
``POD``) or against a cluster (``kubectl``, ``helm``) are not run here; the
end-to-end tests deploy the same way.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_SH_BLOCK = re.compile(r"^( *)```(?:sh|bash)\n(.*?)^\1```", re.DOTALL | re.MULTILINE)
_FLAGS_WITH_VALUES = {"--device", "--domain", "--allocate", "--driver", "--backend", "--config"}
_SUBCOMMANDS = {"validate", "discover", "simulate", "schema", "convert", "deviceclasses"}


def _commands(page: Path) -> list[list[str]]:
    """Every ``genericdp ...`` line of the page's sh blocks, as argv after ``genericdp``."""
    found = []
    for block in _SH_BLOCK.finditer(page.read_text(encoding="utf-8")):
        text = re.sub(r"\\\n\s*", " ", block.group(2))
        for line in text.splitlines():
            words = shlex.split(line, comments=True)
            if len(words) >= 2 and Path(words[0]).name == "genericdp":
                found.append(_without_redirection(words[1:]))
    return found


def _without_redirection(args: list[str]) -> list[str]:
    if ">" in args:
        return args[: args.index(">")]
    return args


def _runnable(args: list[str]) -> bool:
    if not args or args[0] not in _SUBCOMMANDS:
        return False
    positional = []
    rest = iter(args[1:])
    for arg in rest:
        if arg in _FLAGS_WITH_VALUES:
            if arg == "--config":
                positional.append(next(rest, ""))
            else:
                next(rest, None)
        elif not arg.startswith("-"):
            positional.append(arg)
    return all((REPO / path).exists() for path in positional)


CASES = [
    pytest.param(args, id=f"{page.name}: genericdp {' '.join(args)}"[:120])
    for page in PAGES
    for args in _commands(page)
    if _runnable(args)
]


def test_the_docs_show_commands_that_run_here() -> None:
    assert len(CASES) >= 4


@pytest.mark.parametrize("args", CASES)
def test_a_command_in_the_docs_runs(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENERICDP_")}
    done = subprocess.run(
        [sys.executable, "-m", "genericdp", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
