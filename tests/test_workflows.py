"""The release workflow, CI hygiene and the update bot, checked as far as this machine can.

GitHub runs the workflows; here: actions are pinned by commit (with the
release in a comment) and pinned alike everywhere; ci.yaml runs once per pull
request; the release publishes only from a tag, only after every dry-run
build passed, with the least permissions per job; the commands it runs exist;
Renovate's patterns match the files they are meant to update.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tools import versions

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
# Workflows whose every action must be pinned by commit.
PINNED = ("ci.yaml", "release.yaml", "e2e.yaml")
# Actions pinned to a full release tag instead of a commit: none (Helm comes
# from e2e/local/npm-tools.sh, pinned by sum, not from an action).
TAG_PINNED: set[str] = set()
TAG_RELEASE = "refs/tags/v"
PUBLISH_JOBS = ("publish-image", "publish-chart", "publish-pypi", "github-release")
DRY_RUN_JOBS = ("version", "python", "chart", "image")


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe", pure=True).load((WORKFLOWS / name).read_text())
    return data


def uses_lines(name: str) -> list[str]:
    return [
        line.split("uses:", 1)[1].strip()
        for line in (WORKFLOWS / name).read_text().splitlines()
        if re.match(r"\s*(- )?uses:", line)
    ]


@pytest.mark.parametrize("name", PINNED)
def test_actions_are_pinned_by_commit_with_their_release(name: str) -> None:
    """Every `uses:` is action@<40-hex commit> # vX.Y.Z (or, listed, @vX.Y.Z)."""
    for line in uses_lines(name):
        action, _, rest = line.partition("@")
        if action in TAG_PINNED:
            assert re.fullmatch(r"v\d+\.\d+\.\d+ # .+", rest), line
            continue
        assert re.fullmatch(r"[0-9a-f]{40} # v\d+\.\d+\.\d+", rest), line


def test_one_action_one_pin() -> None:
    """An action used in several places is pinned to the same commit everywhere."""
    pins: dict[str, set[str]] = {}
    for name in PINNED:
        for line in uses_lines(name):
            action, _, rest = line.partition("@")
            pins.setdefault(action, set()).add(rest.split()[0])
    assert {a: p for a, p in pins.items() if len(p) > 1} == {}


def test_ci_runs_once_per_pull_request() -> None:
    """ci.yaml: pushes to main only, plus pull requests (a PR branch is not run twice)."""
    on = load("ci.yaml")["on"]
    assert on["push"] == {"branches": ["main"]}
    assert "pull_request" in on


def test_release_runs_on_tags_and_dry_runs_on_main_and_pull_requests() -> None:
    """release.yaml: vX.Y.Z tags release; main and pull requests run the same builds dry."""
    workflow = load("release.yaml")
    assert workflow["on"]["push"] == {"branches": ["main"], "tags": ["v*.*.*"]}
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    for job in DRY_RUN_JOBS:
        assert "if" not in jobs[job], f"{job} must run on every event"
        assert "permissions" not in jobs[job], f"{job} needs no more than contents: read"
    for job in PUBLISH_JOBS:
        assert jobs[job]["if"] == f"startsWith(github.ref, '{TAG_RELEASE}')", job


def needs(jobs: dict[str, Any], job: str) -> set[str]:
    """Every job that must succeed before this one, transitively."""
    direct = jobs[job].get("needs", [])
    direct = [direct] if isinstance(direct, str) else direct
    return set(direct).union(*(needs(jobs, d) for d in direct)) if direct else set()


def test_nothing_publishes_before_every_build_passed_and_pypi_goes_last() -> None:
    """Each publish job waits for all dry-run builds; PyPI (irrevocable) waits for the image."""
    jobs = load("release.yaml")["jobs"]
    for job in PUBLISH_JOBS:
        assert set(DRY_RUN_JOBS) <= needs(jobs, job), job
    assert {"publish-image", "publish-chart"} <= needs(jobs, "publish-pypi")
    assert {"publish-image", "publish-chart", "publish-pypi"} <= needs(jobs, "github-release")


def test_only_publish_jobs_get_write_and_oidc_tokens() -> None:
    """id-token: write only where cosign or PyPI needs it; contents: write only to draft."""
    jobs = load("release.yaml")["jobs"]
    writers = {
        name: job.get("permissions", {})
        for name, job in jobs.items()
        if "write" in job.get("permissions", {}).values()
    }
    assert writers == {
        "publish-image": {"contents": "read", "packages": "write", "id-token": "write"},
        "publish-chart": {"contents": "read", "packages": "write", "id-token": "write"},
        "publish-pypi": {"id-token": "write"},
        "github-release": {"contents": "write"},
    }
    assert jobs["publish-pypi"]["environment"]["name"] == "pypi"


def steps_of(job: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = job["steps"]
    return steps


def test_the_dry_run_builds_what_a_release_publishes() -> None:
    """Both architectures with SBOM and provenance, unpushed; sdist, wheel, chart; all checked."""
    jobs = load("release.yaml")["jobs"]
    env = load("release.yaml")["env"]
    assert env["PLATFORMS"] == "linux/amd64,linux/arm64"
    (oci,) = [s for s in steps_of(jobs["image"]) if "oci" in s.get("with", {}).get("outputs", "")]
    assert oci["with"]["platforms"] == "${{ env.PLATFORMS }}"
    assert oci["with"]["push"] is False
    assert oci["with"]["sbom"] is True
    assert oci["with"]["provenance"] == "mode=max"
    runs = "\n".join(s.get("run", "") for job in jobs.values() for s in steps_of(job))
    assert 'tools.versions artifacts "$VERSION" --oci' in runs
    assert 'tools.versions artifacts "$VERSION" --dist dist' in runs
    assert 'tools.versions artifacts "$VERSION" --chart' in runs
    assert "python -m build --no-isolation" in runs
    assert 'helm package deploy/helm/genericdp --version "$VERSION"' in runs
    assert "docker run --rm genericdp:dry-run --version" in runs
    (push,) = [s for s in steps_of(jobs["publish-image"]) if s.get("id") == "build"]
    assert push["with"]["push"] is True
    assert push["with"]["platforms"] == oci["with"]["platforms"]
    assert push["with"]["build-args"] == oci["with"]["build-args"]


def test_a_tag_must_match_the_checked_in_versions_and_setuptools_scm() -> None:
    """On a tag the version job checks the files against the tag and what setuptools-scm says."""
    (resolve,) = [s for s in steps_of(load("release.yaml")["jobs"]["version"])
                  if s.get("id") == "resolve"]  # fmt: skip
    script = resolve["run"]
    assert 'tools.versions check --tag "$GITHUB_REF_NAME"' in script
    assert "python -m setuptools_scm" in script
    assert "tools.versions notes" in script, "a version without a CHANGELOG section fails early"


def test_signing_and_the_draft_release() -> None:
    """The image is signed and verified by digest; the draft release gets the notes and files."""
    jobs = load("release.yaml")["jobs"]
    sign = "\n".join(s.get("run", "") for s in steps_of(jobs["publish-image"]))
    assert 'cosign sign --yes "$IMAGE@$DIGEST"' in sign
    assert 'cosign verify "$IMAGE@$DIGEST" --certificate-identity "$IDENTITY"' in sign
    draft = "\n".join(s.get("run", "") for s in steps_of(jobs["github-release"]))
    assert "gh release create" in draft
    assert "--draft" in draft
    assert "--notes-file notes.md" in draft
    uses = [s.get("uses", "") for s in steps_of(jobs["publish-pypi"])]
    assert any(u.startswith("pypa/gh-action-pypi-publish@") for u in uses)


def test_every_tools_command_the_workflow_runs_exists(capsys: pytest.CaptureFixture[str]) -> None:
    """Each `python -m tools.versions <command>` in release.yaml is a command of tools.versions."""
    text = (WORKFLOWS / "release.yaml").read_text()
    commands = set(re.findall(r"python3? -m tools\.versions (\w+)", text))
    assert commands == {"resolve", "pep440", "check", "notes", "artifacts"}
    for command in sorted(commands):
        with pytest.raises(SystemExit) as exit_:
            versions.main([command, "--help"])
        assert exit_.value.code == 0, command
    capsys.readouterr()


# -- Renovate ---------------------------------------------------------------------------


def renovate() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((ROOT / "renovate.json").read_text())
    return data


def js_regex(pattern: str) -> re.Pattern[str]:
    """A Renovate (JavaScript) regex: /.../ stripped, (?<name> spelled as Python's (?P<name>."""
    return re.compile(pattern.strip("/").replace("(?<", "(?P<"))


def files_matching(patterns: list[str]) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    tracked = listed.stdout.splitlines()
    return sorted(f for f in tracked if any(js_regex(p).search(f) for p in patterns))


def test_renovate_updates_the_base_digest_and_the_kind_node_images() -> None:
    """Each regex manager finds its file and every pin in it (digest included)."""
    expected = {"Containerfile": 1, "e2e/kind/node-images.txt": 3}
    for manager in renovate()["customManagers"]:
        (path,) = files_matching(manager["managerFilePatterns"])
        text = (ROOT / path).read_text()
        (pattern,) = manager["matchStrings"]
        found = list(js_regex(pattern).finditer(text))
        assert len(found) >= expected.pop(path), path
        for match in found:
            assert match["currentDigest"].startswith("sha256:")
        if path == "e2e/kind/node-images.txt":
            pins = [line for line in text.splitlines() if "@sha256:" in line]
            assert len(found) == len(pins), "a node image the regex does not see"
    assert expected == {}


def test_renovate_refreshes_every_lock() -> None:
    """The pip-compile manager covers requirements/dev.lock, image.lock and release.lock."""
    found = files_matching(renovate()["pip-compile"]["managerFilePatterns"])
    locks = ["dev.lock", "image.lock", "release.lock"]
    assert found == [f"requirements/{lock}" for lock in locks]


def test_renovate_moves_grpc_and_its_stubs_together() -> None:
    """grpcio, grpcio-tools and protobuf are one update (the stubs need all three to agree)."""
    (rule,) = [r for r in renovate()["packageRules"] if "grpcio-tools" in
               r.get("matchPackageNames", [])]  # fmt: skip
    assert set(rule["matchPackageNames"]) == {"grpcio", "grpcio-tools", "protobuf"}
    assert "groupName" in rule
