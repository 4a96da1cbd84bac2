#!/usr/bin/env python3
"""The parts of e2e/local/images.sh that are easier in Python (standard library only).

imagetool.py pip-config OUT   write this machine's effective pip configuration
                              (config files + PIP_* environment) as one file;
                              print the host paths it refers to, one a line
imagetool.py name ARCHIVE NAME
                              set io.containerd.image.name on the one image of an
                              OCI archive, so `ctr images import` names it NAME
imagetool.py names ARCHIVE    print the io.containerd.image.name of each image
imagetool.py layers ARCHIVE   print each layer of the one image: its uncompressed
                              bytes and the step that made it, then the total
"""

from __future__ import annotations

import configparser
import gzip
import io
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"


# -- pip ------------------------------------------------------------------------------------


def pip_config_files() -> list[Path]:
    """pip's own order (pip/_internal/configuration.py): global, user, then PIP_CONFIG_FILE."""
    home = Path.home()
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d]
    files.append(Path("/etc/pip.conf"))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf")
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return [f for f in files if f.is_file()]


def pip_config() -> configparser.RawConfigParser:
    """The merged configuration: later files win, the environment (as [global]) wins last."""
    merged = configparser.RawConfigParser()
    merged.optionxform = lambda option: option.lower().replace("_", "-")  # type: ignore[assignment,method-assign]
    for path in pip_config_files():
        merged.read(path)
    env = {
        key[4:].lower().replace("_", "-"): value
        for key, value in os.environ.items()
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE"
    }
    if env and not merged.has_section("global"):
        merged.add_section("global")
    for key, value in env.items():
        merged.set("global", key, value)
    return merged


INDEX_KEYS = ("index-url", "extra-index-url")


def referenced_paths(config: configparser.RawConfigParser) -> list[str]:
    """Existing absolute host paths the values name (cert, constraint, find-links, file:// indexes).

    A local index (file:///opt/pypi/simple) links its files relative to itself
    (../../files/x.whl), so the directory above it is what must be visible.
    """
    found: list[str] = []
    for section in config.sections():
        for key, value in config.items(section):
            for word in value.split():
                path = word.removeprefix("file://")
                if key in INDEX_KEYS and word.startswith("file://"):
                    path = os.path.dirname(path.rstrip("/"))
                if path.startswith("/") and os.path.exists(path) and path not in found:
                    found.append(path)
    return found


def write_pip_config(out: Path) -> None:
    config = pip_config()
    text = io.StringIO()
    config.write(text)
    out.write_text(text.getvalue())
    out.chmod(0o644)
    for path in referenced_paths(config):
        print(path)


# -- OCI archives ---------------------------------------------------------------------------


def read_index(archive: Path) -> dict[str, object]:
    try:
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
            name = next((n for n in ("index.json", "./index.json") if n in names), None)
            member = tar.extractfile(name) if name else None
            if member is None:
                raise SystemExit(f"{archive}: no index.json: not an OCI archive")
            index = json.load(member)
    except (OSError, tarfile.TarError) as exc:
        raise SystemExit(f"{archive}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{archive}: index.json: {exc}") from None
    if not isinstance(index, dict):
        raise SystemExit(f"{archive}: index.json is not a JSON object")
    return index


def manifests(index: dict[str, object], archive: Path) -> list[dict[str, object]]:
    found = index.get("manifests")
    if not isinstance(found, list) or not found:
        raise SystemExit(f"{archive}: index.json lists no manifest")
    return found


def name_archive(archive: Path, name: str) -> None:
    """Rewrite ARCHIVE with NAME on its single manifest (atomically: a new file, renamed)."""
    index = read_index(archive)
    found = manifests(index, archive)
    if len(found) != 1:
        raise SystemExit(f"{archive}: {len(found)} manifests; expected one image")
    annotations = found[0].setdefault("annotations", {})
    assert isinstance(annotations, dict)
    annotations[CONTAINERD_NAME] = name
    annotations.setdefault(OCI_REF_NAME, name)
    data = json.dumps(index, separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(dir=archive.parent, prefix=f".{archive.name}.")
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w") as out,
            tarfile.open(archive) as src,
        ):
            for member in src:
                if member.name in ("index.json", "./index.json"):
                    member.size = len(data)
                    out.addfile(member, io.BytesIO(data))
                elif member.isfile():
                    with src.extractfile(member) as content:  # type: ignore[union-attr]
                        out.addfile(member, content)
                else:
                    out.addfile(member)
        os.chmod(tmp, 0o644)
        os.replace(tmp, archive)
    except BaseException:
        os.unlink(tmp)
        raise
    if names(archive) != [name]:
        raise SystemExit(f"{archive}: the name did not stick: {names(archive)}")


def names(archive: Path) -> list[str]:
    out = []
    for manifest in manifests(read_index(archive), archive):
        annotations = manifest.get("annotations") or {}
        assert isinstance(annotations, dict)
        out.append(str(annotations.get(CONTAINERD_NAME, "")))
    return out


def _blob(tar: tarfile.TarFile, digest: object) -> io.BufferedReader:
    algorithm, _, value = str(digest).partition(":")
    member = tar.extractfile(f"blobs/{algorithm}/{value}")
    if member is None:
        raise SystemExit(f"no blob {digest} in the archive")
    return member


def layer_sizes(archive: Path) -> list[tuple[int, str]]:
    """(uncompressed bytes, the history step that made it) of each layer, base first."""
    found = manifests(read_index(archive), archive)
    if len(found) != 1:
        raise SystemExit(f"{archive}: {len(found)} manifests; expected one image")
    with tarfile.open(archive) as tar:
        manifest = json.load(_blob(tar, found[0]["digest"]))
        config = json.load(_blob(tar, manifest["config"]["digest"]))
        steps = [
            str(h.get("created_by", ""))
            for h in config.get("history", [])
            if not h.get("empty_layer")
        ]
        sizes = []
        for layer in manifest["layers"]:
            raw = _blob(tar, layer["digest"])
            stream = gzip.GzipFile(fileobj=raw) if "gzip" in layer["mediaType"] else raw
            total = 0
            while chunk := stream.read(1 << 20):
                total += len(chunk)
            sizes.append(total)
    steps = [""] * (len(sizes) - len(steps)) + steps[-len(sizes) :]
    return list(zip(sizes, steps, strict=True))


def main(argv: list[str]) -> int:
    match argv:
        case ["pip-config", out]:
            write_pip_config(Path(out))
        case ["name", archive, name]:
            name_archive(Path(archive), name)
        case ["names", archive]:
            print("\n".join(names(Path(archive))))
        case ["layers", archive]:
            layers = layer_sizes(Path(archive))
            for size, step in layers:
                print(f"{size}\t{step}")
            print(f"{sum(size for size, _ in layers)}\ttotal")
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
