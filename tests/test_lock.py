"""The image installs locked dependencies, and the gRPC stubs fit the versions it locks.

requirements/image.lock is what the Containerfile installs with
`--require-hashes`; requirements/release.lock is what the release job builds
with. The checked-in stubs (src/genericdp/kubelet/api/*_pb2*.py) are the
output of the grpcio-tools pinned in pyproject's dev extras, and they refuse
to import under another protobuf major: the lock must not give the image
one, nor a grpcio other than the one the tests ran with.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "src" / "genericdp" / "kubelet" / "api"
IMAGE_LOCK = ROOT / "requirements" / "image.lock"
RELEASE_LOCK = ROOT / "requirements" / "release.lock"


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def lock_pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version [; marker] \\` line, each followed by its hashes."""
    text = path.read_text()
    pins: dict[str, str] = {}
    for block in re.split(r"\n(?=[a-z0-9])", text):
        # ``name==1.0 \`` or, for a pin with an environment marker, ``name==1.0 ; marker \``
        match = re.match(r"([a-z0-9][a-z0-9._-]*)==(\S+)(?: ;[^\\\n]*)? \\\n", block)
        if match:
            assert "--hash=sha256:" in block, f"{path.name}: {match[1]} has no hash"
            pins[match[1]] = match[2]
    return pins


def dev_pin(name: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in project["optional-dependencies"]["dev"] if d.startswith(f"{name}==")]
    return str(pin).split("==", 1)[1]


def runtime_floor(name: str) -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = [d for d in project["dependencies"] if re.match(rf"{name}\b", d)]
    match = re.search(r">=([\d.]+)", spec)
    assert match, spec
    return match[1]


def grpc_fits(tools: str, locked: str) -> bool:
    """The locked grpcio is the grpcio-tools' (tests ran with it): not older, the same minor."""
    return release(locked)[:2] == release(tools)[:2] and release(locked) >= release(tools)


def stub_versions() -> set[str]:
    """The protobuf gencode versions the checked-in stubs name."""
    return {
        m[1]
        for p in API.glob("*_pb2.py")
        for m in re.finditer(r"^# Protobuf Python Version: (\S+)$", p.read_text(), re.MULTILINE)
    }


def test_the_locks_pin_everything_with_hashes() -> None:
    """Every runtime dependency of pyproject is pinned, with hashes, in the image lock."""
    pins = lock_pins(IMAGE_LOCK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        name = re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower().replace("_", "-")
        name = name.replace(".", "-")
        assert name in pins, f"{name} is not in {IMAGE_LOCK.name}"
    assert "genericdp" not in pins, "the project itself is installed --no-deps, not locked"
    assert {"build", "setuptools", "setuptools-scm"} <= set(lock_pins(RELEASE_LOCK))
    # Renovate refreshes a lock by the pip-compile command in its header.
    for lock in (IMAGE_LOCK, RELEASE_LOCK):
        header = lock.read_text().split("\n\n", 1)[0]
        assert "#    pip-compile " in header
        assert "--generate-hashes" in header
        assert f"--output-file=requirements/{lock.name}" in header


def test_stubs_were_generated_by_one_protoc() -> None:
    """Each *_pb2.py names the same protoc (tests/test_protos.py checks that it is the one
    of the grpcio-tools pinned in the dev extras, ./dev protos)."""
    protobuf = stub_versions()
    assert len(protobuf) == 1, f"stubs from several protoc versions: {protobuf}"


def test_the_image_lock_can_import_the_stubs() -> None:
    """The locked grpcio is at least the pinned grpcio-tools (same minor); protobuf same major."""
    (protobuf,) = stub_versions()
    grpc = dev_pin("grpcio-tools")
    pins = lock_pins(IMAGE_LOCK)
    assert grpc_fits(grpc, pins["grpcio"]), (
        f"image.lock grpcio {pins['grpcio']} vs grpcio-tools {grpc}: bump both together"
    )
    assert release(pins["protobuf"])[0] == release(protobuf)[0]
    assert release(pins["protobuf"]) >= release(protobuf)
    # pip installs outside the image get no older grpcio or protobuf either.
    assert release(runtime_floor("grpcio")) >= release(grpc)
    assert release(runtime_floor("protobuf")) >= release(protobuf)


@pytest.mark.parametrize(
    ("tools", "lock", "ok"),
    [("1.85.1", "1.85.3", True), ("1.85.1", "1.85.1", True), ("1.86.0", "1.85.3", False),
     ("1.85.1", "1.86.0", False)],
)  # fmt: skip
def test_the_grpc_rule_itself(tools: str, lock: str, ok: bool) -> None:
    """The rule above: a newer patch is fine, an older grpcio or another minor is not."""
    assert grpc_fits(tools, lock) is ok
