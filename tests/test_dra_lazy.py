"""The device-plugin backend never loads the Kubernetes API client (DRA contract)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import genericdp.cli, genericdp.daemon, genericdp.simulate, genericdp.report, genericdp.runtime
from genericdp.cli import main
try:
    main(["schema"])
except SystemExit:
    pass
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("lightkube", "httpx2"))
assert not loaded, loaded
"""


def test_the_device_plugin_paths_never_import_lightkube() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_the_dra_modules_do_load_it() -> None:
    """The check above can fail: importing the API client module brings lightkube in."""
    check = CHECK.replace("import sys\n", "import sys\nimport genericdp.kube.client\n", 1)
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "lightkube" in done.stderr
