"""LICENSE holds the license pyproject.toml names, in full: the Apache License 2.0."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text.
APACHE_2_0 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_license_the_package_declares() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["license"]
    assert declared == "Apache-2.0"
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0
