"""Regenerate the protobuf modules of both API packages from their .proto files.

Run as ``python -m tools.protos [OUT_ROOT]`` (``./dev protos``). Each package keeps
its .proto files beside the generated ``*_pb2.py`` and ``*_pb2.pyi``; ``src`` is
protoc's include root, so the generated modules import each other by their full
names. No gRPC code is generated: ``genericdp.grpcservices`` reads the descriptors.
``grpc_tools`` is a development dependency, imported only here. tests/test_protos.py
and tests/test_dra_protos.py generate into a temporary root and fail on any drift.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SRC_ROOT = Path(__file__).resolve().parents[1] / "src"
KUBELET_API = SRC_ROOT / "genericdp" / "kubelet" / "api"
KUBELETPLUGIN_API = SRC_ROOT / "genericdp" / "kubeletplugin" / "api"
PROTOS = {
    KUBELET_API: ("deviceplugin.proto", "podresources.proto"),
    KUBELETPLUGIN_API: (
        "pluginregistration.proto",
        "dra_v1.proto",
        "dra_v1beta1.proto",
        "drahealth_v1.proto",
        "drahealth_v1alpha1.proto",
    ),
}
GENERATED = ("_pb2.py", "_pb2.pyi")


def generate(api_dir: Path, out_root: Path = SRC_ROOT) -> list[Path]:
    """Compile ``api_dir``'s protos into ``out_root``; return the modules written there."""
    from grpc_tools import protoc  # a development dependency

    rel = api_dir.relative_to(SRC_ROOT)
    args = [
        "grpc_tools.protoc",
        f"-I{SRC_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        *(str(rel / p) for p in PROTOS[api_dir]),
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


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC_ROOT
    for api in PROTOS:
        for path in generate(api, out):
            print(path)
