"""The release version: where it is written, how it is set, and whether artifacts carry it.

The one source is the git tag ``vX.Y.Z``: setuptools-scm turns it into the
package version (so ``genericdp --version`` and the wheel), and the release
workflow passes it to the image build (``--build-arg VERSION``) and to
``helm package``. Four files keep a copy because their readers cannot ask git:

- the chart's ``version`` and ``appVersion`` (a chart pulled from a registry
  has no tag to look at),
- the kustomize base's image tag (``?ref=vX.Y.Z`` users get that file as is),
- the Containerfile's default ``VERSION`` (a plain ``docker build`` labels the
  image with it).

``set`` rewrites the four; ``check`` fails when they disagree with each other
or with the tag; ``artifacts`` fails when a built wheel, sdist, chart package
or OCI image disagrees with the version. Only the standard library: the
release workflow runs this before anything is installed.

    python -m tools.versions show
    python -m tools.versions check [--tag vX.Y.Z]
    python -m tools.versions set X.Y.Z
    python -m tools.versions resolve --ref "$GITHUB_REF"
    python -m tools.versions pep440 X.Y.Z-rc.N
    python -m tools.versions artifacts X.Y.Z [--dist DIR] [--chart TGZ] [--oci TAR]
    python -m tools.versions notes X.Y.Z --image IMAGE --digest sha256:... --repository OWNER/REPO
"""

from __future__ import annotations

import argparse
import email.parser
import json
import re
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# What a release tag may say (semver, with the pre-releases PEP 440 can also spell).
SEMVER = re.compile(r"(?P<core>\d+\.\d+\.\d+)(?:-(?P<pre>alpha|beta|rc)\.(?P<n>\d+))?")
PEP440_PRE = {"alpha": "a", "beta": "b", "rc": "rc"}


class VersionError(Exception):
    """A version that is malformed or disagrees with another one."""


@dataclass(frozen=True)
class Copy:
    """One checked-in copy of the version: a file and the line pattern holding it."""

    name: str
    path: str
    pattern: re.Pattern[str]  # group 1: what precedes the version, group 2: the version

    def find(self, root: Path) -> str:
        text = (root / self.path).read_text()
        found = self.pattern.findall(text)
        if len(found) != 1:
            raise VersionError(
                f"{self.path}: expected one {self.name} line, found {len(found)}"
                f" (pattern {self.pattern.pattern!r})"
            )
        return str(found[0][1])

    def rewrite(self, root: Path, version: str) -> bool:
        path = root / self.path
        text = path.read_text()
        new = self.pattern.sub(lambda m: f"{m.group(1)}{version}{m.group(3)}", text)
        if new != text:
            path.write_text(new)
        return new != text


COPIES = (
    Copy(
        "chart version",
        "deploy/helm/genericdp/Chart.yaml",
        re.compile(r"^(version: )(\S+)()$", re.MULTILINE),
    ),
    Copy(
        "chart appVersion",
        "deploy/helm/genericdp/Chart.yaml",
        re.compile(r'^(appVersion: ")([^"]+)(")$', re.MULTILINE),
    ),
    Copy(
        "kustomize image tag",
        "deploy/kustomize/base/daemonset.yaml",
        re.compile(r"^(\s+image: ghcr\.io/genericdp/genericdp:)(\S+)()$", re.MULTILINE),
    ),
    Copy(
        "Containerfile default VERSION",
        "Containerfile",
        re.compile(r"^(ARG VERSION=)(\S+)()$", re.MULTILINE),
    ),
)


def validate(version: str) -> str:
    """The version itself if it is X.Y.Z or X.Y.Z-(alpha|beta|rc).N, else VersionError."""
    if not SEMVER.fullmatch(version):
        raise VersionError(
            f"{version!r} is not a release version: X.Y.Z or X.Y.Z-rc.N (alpha, beta, rc)"
        )
    return version


def python_version(version: str) -> str:
    """The PEP 440 spelling setuptools-scm gives the same tag: 1.2.0-rc.1 -> 1.2.0rc1."""
    match = SEMVER.fullmatch(validate(version))
    if match is None:
        raise RuntimeError("match is not set")
    if match["pre"] is None:
        return match["core"]
    return f"{match['core']}{PEP440_PRE[match['pre']]}{match['n']}"


def from_tag(tag: str) -> str:
    """vX.Y.Z (or refs/tags/vX.Y.Z) -> X.Y.Z."""
    name = tag.removeprefix("refs/tags/")
    if not name.startswith("v"):
        raise VersionError(f"tag {name!r} does not start with v (release tags are vX.Y.Z)")
    return validate(name[1:])


def checked_in(root: Path = ROOT) -> dict[str, str]:
    """Every checked-in copy: 'path (what)' -> version."""
    return {f"{c.path} ({c.name})": c.find(root) for c in COPIES}


def disagreements(found: dict[str, str], expected: str | None = None) -> list[str]:
    """Human-readable lines, one per copy that differs from expected (else from the majority)."""
    values = list(found.values())
    want = expected if expected is not None else max(values, key=values.count)
    problems = [f"{where}: {got} (expected {want})" for where, got in found.items() if got != want]
    for where, got in found.items():
        try:
            validate(got)
        except VersionError as exc:
            problems.append(f"{where}: {exc}")
    return problems


def set_version(version: str, root: Path = ROOT) -> list[str]:
    """Rewrite every checked-in copy; return the files changed."""
    validate(version)
    changed = [c.path for c in COPIES if c.rewrite(root, version)]
    still = disagreements(checked_in(root), version)
    if still:
        raise VersionError("; ".join(still))
    return sorted(set(changed))


# -- built artifacts ---------------------------------------------------------------------


def _metadata_version(text: str) -> str:
    return str(email.parser.Parser().parsestr(text)["Version"])


def check_dist(dist: Path, version: str) -> list[str]:
    """The sdist and the wheel in dist: both present, both versioned as the release."""
    want = python_version(version)
    problems: list[str] = []
    wheels = sorted(dist.glob("genericdp-*.whl"))
    sdists = sorted(dist.glob("genericdp-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"{dist}: expected one wheel and one sdist, found {wheels + sdists}"]
    with zipfile.ZipFile(wheels[0]) as wheel:
        (meta,) = (n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        got = _metadata_version(wheel.read(meta).decode())
    if got != want:
        problems.append(f"{wheels[0].name}: METADATA Version {got} (expected {want})")
    with tarfile.open(sdists[0]) as sdist:
        member = next(m for m in sdist.getmembers() if m.name.count("/") == 1 and
                      m.name.endswith("/PKG-INFO"))  # fmt: skip
        handle = sdist.extractfile(member)
        if handle is None:
            raise RuntimeError("handle is not set")
        got = _metadata_version(handle.read().decode())
    if got != want:
        problems.append(f"{sdists[0].name}: PKG-INFO Version {got} (expected {want})")
    return problems


def check_chart(package: Path, version: str) -> list[str]:
    """A `helm package` archive: its Chart.yaml says version and appVersion = the release."""
    with tarfile.open(package) as tgz:
        member = next(m for m in tgz.getmembers() if m.name.endswith("/Chart.yaml"))
        handle = tgz.extractfile(member)
        if handle is None:
            raise RuntimeError("handle is not set")
        text = handle.read().decode()
    problems = []
    # helm writes the packaged Chart.yaml anew, quoting as its YAML library
    # does (Helm 4 leaves appVersion bare): read the values, not the text.
    for name, key in (("chart version", "version"), ("chart appVersion", "appVersion")):
        found = re.findall(rf"^{key}: ([\"']?)([^\"'\s]+)\1$", text, re.MULTILINE)
        got = found[0][1] if len(found) == 1 else None
        if got != version:
            problems.append(f"{package.name}: {name} {got} (expected {version})")
    return problems


class OciLayout:
    """An OCI image layout tarball, as `docker buildx build --output type=oci` writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar = tarfile.open(path)  # noqa: SIM115 (closed by close())

    def close(self) -> None:
        self._tar.close()

    def _read(self, name: str) -> Any:
        # Some writers store members as ./name.
        members = set(self._tar.getnames())
        member = name if name in members else f"./{name}"
        handle = self._tar.extractfile(member)
        if handle is None:
            raise RuntimeError("handle is not set")
        return json.loads(handle.read())

    def blob(self, digest: str) -> Any:
        algorithm, _, value = digest.partition(":")
        return self._read(f"blobs/{algorithm}/{value}")

    def descriptors(self) -> Iterator[dict[str, Any]]:
        """Every manifest descriptor, image indexes unfolded."""
        pending: list[dict[str, Any]] = list(self._read("index.json")["manifests"])
        while pending:
            descriptor = pending.pop(0)
            if descriptor["mediaType"].endswith("image.index.v1+json"):
                pending.extend(self.blob(descriptor["digest"])["manifests"])
            else:
                yield descriptor


def check_oci(path: Path, version: str, platforms: tuple[str, ...]) -> list[str]:
    """Each platform's image is labelled with the version and carries an SBOM and provenance."""
    layout = OciLayout(path)
    try:
        images: dict[str, dict[str, Any]] = {}
        attestations: dict[str, set[str]] = {}
        for descriptor in layout.descriptors():
            annotations = descriptor.get("annotations", {})
            if annotations.get("vnd.docker.reference.type") == "attestation-manifest":
                manifest = layout.blob(descriptor["digest"])
                attestations[annotations["vnd.docker.reference.digest"]] = {
                    layer.get("annotations", {}).get("in-toto.io/predicate-type", "")
                    for layer in manifest["layers"]
                }
                continue
            platform = descriptor.get("platform", {})
            images[f"{platform.get('os')}/{platform.get('architecture')}"] = descriptor
        problems = []
        if sorted(images) != sorted(platforms):
            problems.append(f"{path.name}: platforms {sorted(images)} (expected {platforms})")
        for name, descriptor in sorted(images.items()):
            manifest = layout.blob(descriptor["digest"])
            labels = layout.blob(manifest["config"]["digest"]).get("config", {}).get("Labels")
            got = (labels or {}).get("org.opencontainers.image.version")
            if got != version:
                problems.append(f"{name}: label org.opencontainers.image.version {got}"
                                f" (expected {version})")  # fmt: skip
            kinds = attestations.get(descriptor["digest"], set())
            if not any("spdx" in k for k in kinds):
                problems.append(f"{name}: no SBOM attestation (found {sorted(kinds)})")
            if not any("slsa.dev/provenance" in k for k in kinds):
                problems.append(f"{name}: no provenance attestation (found {sorted(kinds)})")
        return problems
    finally:
        layout.close()


# -- release notes ---------------------------------------------------------------------


def changelog_section(text: str, version: str) -> str:
    """The body of `## [version]` in a Keep-a-Changelog file."""
    match = re.search(
        rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|^\[[^\]]+\]: |\Z)",
        text,
        re.MULTILINE | re.DOTALL,
    )
    if match is None or not match.group(1).strip():
        raise VersionError(f"CHANGELOG.md has no section for [{version}]: add it before tagging")
    return match.group(1).strip()


def release_notes(version: str, *, image: str, digest: str, repository: str, changelog: str) -> str:
    """The draft GitHub release: the changelog section, the digest and how to verify it."""
    identity = (
        f"https://github.com/{repository}/.github/workflows/release.yaml@refs/tags/v{version}"
    )
    owner = repository.partition("/")[0].lower()
    return f"""{changelog_section(changelog, version)}

## Image

`{image}:{version}` is `{image}@{digest}` (linux/amd64, linux/arm64), signed
keylessly by this repository's release workflow, with an SBOM and SLSA
provenance attached. Deploy by digest, and verify before you do:

```sh
cosign verify {image}@{digest} \\
  --certificate-identity {identity} \\
  --certificate-oidc-issuer https://token.actions.githubusercontent.com
```

Helm chart: `helm install genericdp oci://ghcr.io/{owner}/charts/genericdp --version {version}`.
Python package: `pip install genericdp=={python_version(version)}`.
"""


# -- command line ----------------------------------------------------------------------


def _fail(title: str, problems: list[str], hint: str | None = None) -> int:
    lines = [f"{title}:", *problems] + ([f"fix: {hint}"] if hint else [])
    print("\n".join(lines), file=sys.stderr)
    return 1


def _show(_: argparse.Namespace) -> int:
    for where, version in checked_in().items():
        print(f"{version}\t{where}")
    return 0


def _check(args: argparse.Namespace) -> int:
    expected = from_tag(args.tag) if args.tag else None
    problems = disagreements(checked_in(), expected)
    if problems:
        return _fail("versions disagree", problems, f"./dev version {expected or 'X.Y.Z'}")
    return 0


def _set(args: argparse.Namespace) -> int:
    for path in set_version(args.version):
        print(f"{args.version}\t{path}")
    return 0


def _pep440(args: argparse.Namespace) -> int:
    print(python_version(args.version))
    return 0


def _resolve(args: argparse.Namespace) -> int:
    # A tag releases itself; anything else dry-runs the checked-in version.
    if args.ref.startswith("refs/tags/"):
        print(from_tag(args.ref))
        return 0
    found = checked_in()
    problems = disagreements(found)
    if problems:
        return _fail("versions disagree", problems, "./dev version X.Y.Z")
    print(next(iter(found.values())))
    return 0


def _artifacts(args: argparse.Namespace) -> int:
    validate(args.version)
    problems = []
    if args.dist:
        problems += check_dist(args.dist, args.version)
    if args.chart:
        problems += check_chart(args.chart, args.version)
    if args.oci:
        problems += check_oci(args.oci, args.version, tuple(args.platforms.split(",")))
    return _fail("artifacts disagree", problems) if problems else 0


def _notes(args: argparse.Namespace) -> int:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    notes = release_notes(
        args.version,
        image=args.image,
        digest=args.digest,
        repository=args.repository,
        changelog=changelog,
    )
    print(notes)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.versions", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("show", help="print every checked-in copy").set_defaults(run=_show)
    check = sub.add_parser("check", help="fail when the copies disagree (or differ from --tag)")
    check.add_argument("--tag")
    check.set_defaults(run=_check)
    setter = sub.add_parser("set", help="rewrite every copy")
    setter.add_argument("version")
    setter.set_defaults(run=_set)
    pep440 = sub.add_parser(
        "pep440", help="the Python spelling of a version (1.0.0-rc.1: 1.0.0rc1)"
    )
    pep440.add_argument("version")
    pep440.set_defaults(run=_pep440)
    resolve = sub.add_parser("resolve", help="the version to build for a git ref")
    resolve.add_argument("--ref", required=True)
    resolve.set_defaults(run=_resolve)
    artifacts = sub.add_parser("artifacts", help="check built artifacts against a version")
    artifacts.add_argument("version")
    artifacts.add_argument("--dist", type=Path)
    artifacts.add_argument("--chart", type=Path)
    artifacts.add_argument("--oci", type=Path)
    artifacts.add_argument("--platforms", default="linux/amd64,linux/arm64")
    artifacts.set_defaults(run=_artifacts)
    notes = sub.add_parser("notes", help="the draft release's text")
    notes.add_argument("version")
    notes.add_argument("--image", required=True)
    notes.add_argument("--digest", required=True)
    notes.add_argument("--repository", required=True)
    notes.set_defaults(run=_notes)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except VersionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
