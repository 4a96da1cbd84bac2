"""One version, from the tag: the checked-in copies agree, and the built artifacts carry it.

tools/versions.py is what the release workflow runs; these tests hold it to
the files of this repository and to artifacts built here (the wheel and sdist
for real; the chart package and the OCI layout as `helm package` and
`docker buildx --output type=oci` lay them out).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from genericdp import __version__
from tools import versions
from tools.versions import VersionError

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "genericdp"


def tree_copy(tmp_path: Path) -> Path:
    """The files holding a version copy, in a scratch tree."""
    for copy in versions.COPIES:
        target = tmp_path / copy.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / copy.path, target)
    shutil.copy(ROOT / "CHANGELOG.md", tmp_path / "CHANGELOG.md")
    return tmp_path


# -- the checked-in copies ----------------------------------------------------------------


def test_checked_in_versions_agree() -> None:
    """Chart version, appVersion, the kustomize image tag and the Containerfile default agree."""
    found = versions.checked_in()
    assert len(found) == len(versions.COPIES) == 4
    assert versions.disagreements(found) == []


def test_the_version_is_written_nowhere_else() -> None:
    """pyproject takes the version from git and the package from its metadata: no literal."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert "setuptools-scm>=8" in project["build-system"]["requires"]
    assert not [r for r in project["build-system"]["requires"] if r.startswith("wheel")]
    init = (ROOT / "src" / "genericdp" / "__init__.py").read_text()
    assert not re.search(r"__version__\s*=\s*['\"]\d", init.replace('"0.0.0"', ""))
    assert 'version("genericdp")' in init


def test_genericdp_version_is_the_installed_metadata() -> None:
    """`genericdp --version` prints what the package metadata (setuptools-scm) says."""
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", "genericdp", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.strip() == f"genericdp {version('genericdp')}" == f"genericdp {__version__}"
    )


@pytest.mark.parametrize("copy", versions.COPIES, ids=lambda c: c.name)
def test_a_disagreeing_copy_is_named(copy: versions.Copy, tmp_path: Path) -> None:
    """Any one copy changed alone is reported with its file and what was expected."""
    root = tree_copy(tmp_path)
    path = root / copy.path
    path.write_text(copy.pattern.sub(lambda m: f"{m.group(1)}9.9.9{m.group(3)}", path.read_text()))
    problems = versions.disagreements(versions.checked_in(root))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{copy.path} ({copy.name}): 9.9.9 (expected ")


def test_set_rewrites_every_copy_and_nothing_else(tmp_path: Path) -> None:
    """`./dev version 1.2.3` changes exactly the version on the four lines."""
    root = tree_copy(tmp_path)
    before = {c.path: (root / c.path).read_text() for c in versions.COPIES}
    changed = versions.set_version("1.2.3-rc.1", root)
    assert changed == sorted({c.path for c in versions.COPIES})
    assert set(versions.checked_in(root).values()) == {"1.2.3-rc.1"}
    for path, text in before.items():
        new = (root / path).read_text()
        assert len(new.splitlines()) == len(text.splitlines())
        diff = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=True) if a != b]
        assert all(a.replace("0.1.0", "1.2.3-rc.1") == b for a, b in diff), diff


def test_check_against_a_tag() -> None:
    """`check --tag` fails, naming the fix, when the files were not bumped for the tag."""
    current = next(iter(versions.checked_in().values()))
    assert versions.main(["check", "--tag", f"v{current}"]) == 0
    assert versions.main(["check", "--tag", "v99.0.0"]) == 1


def test_setting_a_malformed_version_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`./dev version 1.2` is refused with the expected form, and no file is touched."""
    root = tree_copy(tmp_path)
    before = {c.path: (root / c.path).read_text() for c in versions.COPIES}
    with pytest.raises(VersionError, match=r"not a release version: X\.Y\.Z"):
        versions.set_version("1.2", root)
    assert {c.path: (root / c.path).read_text() for c in versions.COPIES} == before
    assert versions.main(["set", "1.2"]) == 1
    assert "error: '1.2' is not a release version" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("tag", "version", "python"),
    [
        ("v0.1.0", "0.1.0", "0.1.0"),
        ("refs/tags/v1.20.3", "1.20.3", "1.20.3"),
        ("v2.0.0-rc.1", "2.0.0-rc.1", "2.0.0rc1"),
        ("v2.0.0-beta.2", "2.0.0-beta.2", "2.0.0b2"),
        ("v2.0.0-alpha.0", "2.0.0-alpha.0", "2.0.0a0"),
    ],
)
def test_tags_map_to_chart_and_python_versions(tag: str, version: str, python: str) -> None:
    """A tag gives the semver the chart wants and the PEP 440 form setuptools-scm writes."""
    assert versions.from_tag(tag) == version
    assert versions.python_version(version) == python


@pytest.mark.parametrize("tag", ["0.1.0", "v0.1", "v0.1.0.1", "v1.0.0-rc1", "v1.0.0+build", "vX"])
def test_malformed_tags_are_refused(tag: str) -> None:
    """Anything but vX.Y.Z[-(alpha|beta|rc).N] is refused with the expected form."""
    with pytest.raises(VersionError, match=r"vX\.Y\.Z|X\.Y\.Z"):
        versions.from_tag(tag)


def test_resolve_prints_the_tag_or_the_checked_in_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tag push releases the tag's version; a branch dry-runs the checked-in one."""
    assert versions.main(["resolve", "--ref", "refs/tags/v3.4.5"]) == 0
    assert capsys.readouterr().out.strip() == "3.4.5"
    assert versions.main(["resolve", "--ref", "refs/heads/main"]) == 0
    assert capsys.readouterr().out.strip() == next(iter(versions.checked_in().values()))


# -- built artifacts ----------------------------------------------------------------------


def build_dist(out: Path, version: str) -> None:
    """The sdist, then the wheel from it, as the release job builds them (no isolation)."""
    pytest.importorskip("build", reason="the build frontend is in the dev extras")
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_GENERICDP": version}
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_sdist_and_wheel_build_and_carry_the_release_version(tmp_path: Path) -> None:
    """The sdist and wheel build, say the version given, and ship the protos and schema."""
    build_dist(tmp_path, "7.8.9rc2")
    assert versions.check_dist(tmp_path, "7.8.9-rc.2") == []
    assert versions.check_dist(tmp_path, "7.8.9") != []
    (wheel,) = tmp_path.glob("*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("genericdp/py.typed", "genericdp/config/config-v1.schema.json"):
        assert needed in names
    assert "genericdp/kubelet/api/deviceplugin.proto" in names


def chart_package(out: Path, version: str) -> Path:
    """The chart as `helm package` lays it out: <name>/..., Chart.yaml rewritten."""
    path = out / f"genericdp-{version}.tgz"
    with tarfile.open(path, "w:gz") as tgz:
        for file in sorted(CHART.rglob("*")):
            if file.is_file():
                data = file.read_bytes()
                if file.name == "Chart.yaml":
                    text = data.decode()
                    for copy in versions.COPIES[:2]:
                        text = copy.pattern.sub(lambda m: f"{m[1]}{version}{m[3]}", text)
                    data = text.encode()
                info = tarfile.TarInfo(f"genericdp/{file.relative_to(CHART)}")
                info.size = len(data)
                tgz.addfile(info, io.BytesIO(data))
    return path


def test_chart_package_version_is_checked(tmp_path: Path) -> None:
    """A chart package whose version or appVersion is not the release's is reported."""
    good = chart_package(tmp_path, "1.2.3")
    assert versions.check_chart(good, "1.2.3") == []
    problems = versions.check_chart(good, "1.2.4")
    assert len(problems) == 2
    assert "chart version 1.2.3 (expected 1.2.4)" in problems[0]


@pytest.mark.skipif(shutil.which("helm") is None, reason="helm not installed")
def test_helm_package_carries_the_release_version(tmp_path: Path) -> None:
    """`helm package --version --app-version`, as the release job runs it, passes the check."""
    result = subprocess.run(
        ["helm", "package", str(CHART), "--version", "1.2.3", "--app-version", "1.2.3",
         "--destination", str(tmp_path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert versions.check_chart(tmp_path / "genericdp-1.2.3.tgz", "1.2.3") == []


class Layout:
    """A small OCI image layout in the shape buildx writes: index -> images + attestations."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def add(self, obj: Any) -> dict[str, Any]:
        import hashlib

        data = json.dumps(obj).encode()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    def image(self, arch: str, version: str | None) -> dict[str, Any]:
        labels = {"org.opencontainers.image.version": version} if version else {}
        config = self.add({"architecture": arch, "os": "linux", "config": {"Labels": labels}})
        manifest = self.add({"schemaVersion": 2, "config": config, "layers": []})
        return {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **manifest,
            "platform": {"architecture": arch, "os": "linux"},
        }

    def attestation(self, subject: str, predicates: list[str]) -> dict[str, Any]:
        layers = [
            {**self.add({"predicate": {}}), "mediaType": "application/vnd.in-toto+json",
             "annotations": {"in-toto.io/predicate-type": p}}
            for p in predicates
        ]  # fmt: skip
        manifest = self.add({"schemaVersion": 2, "config": self.add({}), "layers": layers})
        return {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **manifest,
            "platform": {"architecture": "unknown", "os": "unknown"},
            "annotations": {
                "vnd.docker.reference.type": "attestation-manifest",
                "vnd.docker.reference.digest": subject,
            },
        }

    def write(self, path: Path, manifests: list[dict[str, Any]]) -> Path:
        index = self.add({"schemaVersion": 2, "manifests": manifests})
        top = {"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.index.v1+json", **index}
        ]}  # fmt: skip
        with tarfile.open(path, "w") as tar:
            for name, data in [("index.json", json.dumps(top).encode())] + [
                (f"blobs/sha256/{d.split(':')[1]}", b) for d, b in self.blobs.items()
            ]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path


SBOM = "https://spdx.dev/Document"
PROVENANCE = "https://slsa.dev/provenance/v0.2"
PLATFORMS = ("linux/amd64", "linux/arm64")


def test_oci_layout_with_both_platforms_labels_sbom_and_provenance_passes(tmp_path: Path) -> None:
    """Both images labelled with the version, each with its SBOM and provenance: no problem."""
    layout = Layout()
    amd, arm = layout.image("amd64", "1.0.0"), layout.image("arm64", "1.0.0")
    manifests = [amd, arm, layout.attestation(amd["digest"], [SBOM, PROVENANCE]),
                 layout.attestation(arm["digest"], [SBOM, PROVENANCE])]  # fmt: skip
    path = layout.write(tmp_path / "image.oci.tar", manifests)
    assert versions.check_oci(path, "1.0.0", PLATFORMS) == []


def test_oci_layout_problems_are_each_reported(tmp_path: Path) -> None:
    """A missing platform, a wrong label and a missing SBOM are each reported."""
    layout = Layout()
    amd = layout.image("amd64", "0.9.0")
    path = layout.write(
        tmp_path / "image.oci.tar", [amd, layout.attestation(amd["digest"], [PROVENANCE])]
    )
    problems = "\n".join(versions.check_oci(path, "1.0.0", PLATFORMS))
    assert "platforms ['linux/amd64']" in problems
    assert "org.opencontainers.image.version 0.9.0 (expected 1.0.0)" in problems
    assert "linux/amd64: no SBOM attestation" in problems
    assert "no provenance" not in problems


# -- release notes --------------------------------------------------------------------------


def test_changelog_has_the_checked_in_version_and_unreleased() -> None:
    """CHANGELOG.md (Keep a Changelog) has an Unreleased section and one for the current version."""
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "## [Unreleased]" in text
    current = next(iter(versions.checked_in().values()))
    assert "### Added" in versions.changelog_section(text, current)
    with pytest.raises(VersionError, match=r"no section for \[42\.0\.0\]"):
        versions.changelog_section(text, "42.0.0")


def test_release_notes_carry_the_changelog_digest_and_verify_command() -> None:
    """The draft release says what changed, the digest, and the exact cosign verify command."""
    digest = "sha256:" + "ab" * 32
    current = next(iter(versions.checked_in().values()))
    notes = versions.release_notes(
        current,
        image="ghcr.io/acme/genericdp",
        digest=digest,
        repository="Acme/genericdp",
        changelog=(ROOT / "CHANGELOG.md").read_text(),
    )
    assert versions.changelog_section((ROOT / "CHANGELOG.md").read_text(), current) in notes
    assert f"cosign verify ghcr.io/acme/genericdp@{digest}" in notes
    assert (
        "--certificate-identity https://github.com/Acme/genericdp/.github/workflows/"
        f"release.yaml@refs/tags/v{current}" in notes
    )
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in notes
    assert "oci://ghcr.io/acme/charts/genericdp" in notes
