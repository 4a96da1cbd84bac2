"""``python -m genericdp`` is the ``genericdp`` command."""

import sys

from genericdp.cli import main

sys.exit(main())
