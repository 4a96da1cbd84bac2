"""Regenerate the DRA API stubs from the .proto files in this folder.

Run as ``python -m genericdp.dra.api.generate [OUT_ROOT]`` (``./dev protos``
runs it with the device-plugin API's). The protos are compiled with ``src``
as the include root, so the generated modules import each other as
``genericdp.dra.api.*``. ``tests/test_dra_protos.py`` runs this into a
temporary directory and fails if the checked-in stubs drift.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

API_DIR = Path(__file__).resolve().parent
SRC_ROOT = API_DIR.parents[2]
PROTOS = (
    "pluginregistration.proto",
    "dra_v1.proto",
    "dra_v1beta1.proto",
    "drahealth_v1alpha1.proto",
)


def generate(out_root: Path = SRC_ROOT) -> list[Path]:
    """Compile every proto into ``out_root``; return the files written."""
    from grpc_tools import protoc  # dev-only dependency

    rel = API_DIR.relative_to(SRC_ROOT)
    args = [
        "grpc_tools.protoc",
        f"-I{SRC_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(rel / p) for p in PROTOS),
    ]
    out_dir = out_root / rel
    out_dir.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd()
    os.chdir(SRC_ROOT)  # protoc resolves the proto paths against the include root
    try:
        code = protoc.main(args)
    finally:
        os.chdir(cwd)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    return sorted(
        p for p in out_dir.iterdir() if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))
    )


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC_ROOT
    for path in generate(out):
        print(path)
