"""./dev's set-up: demo installs the runtime's locks only, the other commands the dev lock.

./dev runs in a copy of the repository's top with a stand-in PYTHON whose
``-m venv DIR`` makes a venv of stand-ins: its python logs each pip install,
its genericdp and ruff do nothing. What the log says is what ./dev installed:
the locks given to each ``pip install --require-hashes``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ["image.lock", "release.lock"]
DEV = ["dev.lock"]
FAKE_PYTHON = """\
#!/usr/bin/env bash
# The stand-in python3: version checks pass, -m venv DIR makes the stand-in venv.
if [[ $1 == -c ]]; then exit 0; fi
if [[ $1 == -m && $2 == venv ]]; then
  mkdir -p "$3/bin"
  printf '#!/usr/bin/env bash\\necho "$*" >>%q\\n' "$LOG" >"$3/bin/python"
  printf '#!/usr/bin/env bash\\nexit 0\\n' >"$3/bin/genericdp"
  cp "$3/bin/genericdp" "$3/bin/ruff"
  chmod +x "$3/bin/"*
  exit 0
fi
exit 1
"""


def _installs(top: Path, log: Path, *commands: str) -> list[list[str]]:
    """The locks pip installed for each ./dev command, in order."""
    done = []
    for command in commands:
        before = log.read_text().splitlines() if log.exists() else []
        result = subprocess.run(
            ["./dev", command],
            cwd=top,
            env={**os.environ, "PYTHON": str(top / "python3"), "LOG": str(log)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        after = log.read_text().splitlines() if log.exists() else []
        new = after[len(before) :]
        done.append([
            word.removeprefix("--requirement=requirements/")
            for line in new if "--require-hashes" in line
            for word in line.split() if word.startswith("--requirement=")
        ])  # fmt: skip
    return done


def _top(tmp_path: Path) -> tuple[Path, Path]:
    top = tmp_path / "repo"
    top.mkdir()
    shutil.copy(ROOT / "dev", top / "dev")
    shutil.copy(ROOT / "pyproject.toml", top / "pyproject.toml")
    shutil.copytree(ROOT / "requirements", top / "requirements")
    (top / "python3").write_text(FAKE_PYTHON)
    (top / "python3").chmod(0o755)
    return top, tmp_path / "pip.log"


def test_demo_installs_the_runtime_and_lint_adds_the_extras(tmp_path: Path) -> None:
    top, log = _top(tmp_path)
    assert _installs(top, log, "demo", "demo", "lint", "lint", "demo") == [
        RUNTIME, [], DEV, [], [],
    ]  # fmt: skip


def test_demo_after_the_dev_install_installs_nothing(tmp_path: Path) -> None:
    top, log = _top(tmp_path)
    assert _installs(top, log, "lint", "demo") == [DEV, []]


def test_a_changed_pyproject_installs_again(tmp_path: Path) -> None:
    top, log = _top(tmp_path)
    _installs(top, log, "lint")
    stamp = top / ".venv" / ".installed-dev"
    os.utime(stamp, (1, 1))  # older than pyproject.toml
    assert _installs(top, log, "demo") == [RUNTIME]
