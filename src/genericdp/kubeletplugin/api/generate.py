"""Regenerate the DRA API stubs from the .proto files in this folder.

Run as ``python -m genericdp.kubeletplugin.api.generate [OUT_ROOT]`` (``./dev protos``
runs it with the device-plugin API's). ``tests/test_dra_protos.py`` runs this
into a temporary directory and fails if the checked-in stubs drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

from genericdp.protogen import SRC_ROOT, compile_protos

API_DIR = Path(__file__).resolve().parent
PROTOS = (
    "pluginregistration.proto",
    "dra_v1.proto",
    "dra_v1beta1.proto",
    "drahealth_v1.proto",
    "drahealth_v1alpha1.proto",
)


def generate(out_root: Path = SRC_ROOT) -> list[Path]:
    """Compile every proto into ``out_root``; return the files written."""
    return compile_protos(API_DIR, PROTOS, out_root)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC_ROOT
    for path in generate(out):
        print(path)
