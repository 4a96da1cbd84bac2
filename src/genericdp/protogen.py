"""The protoc run both API packages' ``generate.py`` share (a development tool: ``grpc_tools``
is imported only here). ``src`` is the include root, so the generated modules import each
other by their full names; no gRPC code is generated (``grpcservices`` reads descriptors).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

SRC_ROOT = Path(__file__).resolve().parents[1]
GENERATED = ("_pb2.py", "_pb2.pyi")


def compile_protos(api_dir: Path, protos: Sequence[str], out_root: Path = SRC_ROOT) -> list[Path]:
    """Compile ``protos`` (names in ``api_dir``) into ``out_root``; return the stubs there."""
    from grpc_tools import protoc  # dev-only dependency

    rel = api_dir.relative_to(SRC_ROOT)
    args = [
        "grpc_tools.protoc",
        f"-I{SRC_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        *(str(rel / p) for p in protos),
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
    return sorted(p for p in out_dir.iterdir() if p.name.endswith(GENERATED))
