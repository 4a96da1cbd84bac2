"""Every lock is complete, and everything installed from one resolves nothing.

The image, ./dev and the release job install their locks with ``--no-deps``:
no requirement is resolved at install time, so no upstream release can change
or break what is installed. That holds only while each lock pins every
requirement of every package it pins, with the extras its requirers ask for
kept on the pin (an extras requirement left to pip, ``httpx2[http2,ws]>=…``
under ``lightkube``, was resolved to the newest upstream release and broke
the image build). The requirements are read from the metadata of the
packages this environment has, which ./dev installed from
requirements/dev.lock: the same pins as the image's and the release's.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = {name: ROOT / "requirements" / f"{name}.lock" for name in ("image", "release", "dev")}
_PIN = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)(?: ;[^\\\n]*)? \\$", re.MULTILINE
)


@dataclass(frozen=True)
class Pin:
    version: str
    extras: frozenset[str]


def pins(lock: Path) -> dict[str, Pin]:
    """name -> the pinned version and the extras kept on the pin."""
    found: dict[str, Pin] = {}
    for match in _PIN.finditer(lock.read_text()):
        extras = frozenset(e.strip() for e in (match[2] or "[]")[1:-1].split(",") if e.strip())
        found[canonicalize_name(match[1])] = Pin(match[3], extras)
    return found


def roots(lock: str) -> list[Requirement]:
    """What a lock is made for: pyproject's dependencies, the dev extra, release.in."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    release = [
        Requirement(line)
        for line in (ROOT / "requirements" / "release.in").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    deps = [Requirement(d) for d in project["dependencies"]]
    dev = [Requirement(d) for d in project["optional-dependencies"]["dev"]]
    return {"image": deps, "release": release, "dev": deps + dev + release}[lock]


def applies(req: Requirement, extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    return any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""}))


def missing(lock: dict[str, Pin], wanted: list[Requirement]) -> list[str]:
    """What the lock lacks: a requirement of a pinned package (with its extras) not pinned."""
    problems: list[str] = []
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(req, "the lock's input") for req in wanted]
    while todo:
        req, by = todo.pop()
        name = canonicalize_name(req.name)
        extras = frozenset(req.extras)
        pin = lock.get(name)
        if pin is None:
            problems.append(f"{req} (asked for by {by}) is not pinned")
            continue
        if not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{req} (asked for by {by}) is pinned at {pin.version}")
        if not extras <= pin.extras:
            problems.append(
                f"{req} (asked for by {by}): the pin keeps extras {sorted(pin.extras)}, "
                f"not {sorted(extras)}"
            )
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed here: run ./dev setup")
            continue
        if dist.version != pin.version:
            problems.append(
                f"{name} is {dist.version} here, {pin.version} in the lock: ./dev setup"
            )
            continue
        for line in dist.requires or []:
            sub = Requirement(line)
            if applies(sub, extras):
                todo.append((sub, f"{name}=={pin.version}"))
    return problems


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_lock_pins_every_requirement_of_what_it_pins(lock: str) -> None:
    """Installed --no-deps, a lock must hold every requirement it leads to, extras kept."""
    assert missing(pins(LOCKS[lock]), roots(lock)) == []


def test_an_extras_requirement_pinned_without_its_extras_is_incomplete() -> None:
    """The rule catches the lock that broke the image: httpx2 pinned without [http2,ws]."""
    lock = pins(LOCKS["image"])
    stripped = {**lock, "httpx2": Pin(lock["httpx2"].version, frozenset())}
    problems = missing(stripped, roots("image"))
    assert any("httpx2[http2,ws]" in p and "not ['http2', 'ws']" in p for p in problems)
    without_h2 = {name: pin for name, pin in lock.items() if name != "h2"}
    assert any(p.startswith("h2") for p in missing(without_h2, roots("image")))


def test_the_dev_lock_has_the_image_and_release_pins() -> None:
    """One .venv holds what the image and the release install, at the same versions."""
    dev = pins(LOCKS["dev"])
    for lock in ("image", "release"):
        for name, pin in pins(LOCKS[lock]).items():
            assert dev.get(name) == pin, f"{name}: {lock}.lock {pin}, dev.lock {dev.get(name)}"


def _pip_installs() -> list[tuple[str, str]]:
    """(file, command) of every pip install from a lock the repository runs."""
    files = [ROOT / "Containerfile", ROOT / "dev", *sorted((ROOT / ".github").rglob("*.y*ml"))]
    found = []
    for path in files:
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if re.search(r"pip\S*\"?\]?\}? install\b.*(--require-hashes|\.lock)", line):
                found.append((str(path.relative_to(ROOT)), line.strip()))
    return found


def test_every_install_from_a_lock_resolves_nothing_and_is_checked() -> None:
    """Each pip install of a lock has --no-deps and --require-hashes; its file runs pip check."""
    installs = _pip_installs()
    assert {f for f, _ in installs} >= {"Containerfile", "dev", ".github/workflows/release.yaml"}
    for path, line in installs:
        assert "--no-deps" in line, f"{path}: {line}"
        assert "--require-hashes" in line, f"{path}: {line}"
        assert re.search(r"pip\S*\"?\]?\}? check", (ROOT / path).read_text()), path


def test_the_image_builds_the_project_with_the_locked_build_tools() -> None:
    """The Containerfile builds genericdp with release.lock's backend, fetching nothing.

    pip's default build isolation installs the [build-system] requirements from
    the index in a throwaway environment: the image build resolved setuptools
    and setuptools-scm there, whatever PyPI published that day.
    """
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    builds = [
        line for line in text.splitlines() if re.search(r"pip (install|wheel)\b.* /src\b", line)
    ]
    assert builds, "the Containerfile builds no /src"
    for line in builds:
        assert "--no-build-isolation" in line, line
        assert "--check-build-dependencies" in line, line
        venv = re.search(r"(/opt/\w+)/bin/pip (install|wheel)\b[^&]* /src\b", line)
        assert venv, line
        tools = "--no-deps --require-hashes -r requirements/release.lock"
        assert f"{venv[1]}/bin/pip install {tools}" in line, f"{venv[1]} has no build tools"
    build_system = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    locked = pins(LOCKS["release"])
    for requirement in map(Requirement, build_system["requires"]):
        pin = locked.get(canonicalize_name(requirement.name))
        assert pin, f"release.lock lacks {requirement}"
        assert requirement.specifier.contains(pin.version), f"release.lock: {pin} for {requirement}"
