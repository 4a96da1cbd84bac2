"""Compile an API package's .proto files into Python message modules (a development tool).

Both protocol packages (``genericdp.kubelet.api``, ``genericdp.kubeletplugin.api``) keep
their .proto files beside the generated modules and regenerate them with
``python -m genericdp.<package>.api.generate``; this is the one protoc run they
share. The protos are compiled with ``src`` as the include root, so the
generated modules import each other by their full names
(``genericdp.kubelet.api.*``). ``grpc_tools`` is a development dependency
only: it is imported when stubs are generated, never by the daemon. No gRPC
code is generated: ``grpcservices`` reads the services from their descriptors.
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
