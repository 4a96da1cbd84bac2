"""Names the DRA backend publishes: the driver, and one device name per unit.

A device name must be a DNS-1123 label (at most 63 characters of ``[a-z0-9-]``) unique in the
node's pool, which holds every resource's devices. A stable ID (``usb-FTDI_FT232R_A1B2:1``) is
none of that, so the name is the resource's short name and the ID, lowercased, other
characters made ``-``, cut to fit, then ``-`` and eight hex digits of a hash of the exact
resource and ID. The hash is always there: two resources may share a short name, and two IDs
may differ only in what the label loses; the same unit always gets the same name.
"""

from __future__ import annotations

import hashlib
import re

DEFAULT_DRIVER = "genericdp.io"
DNS1123_LABEL_MAX = 63
_HASH_LENGTH = 8
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")


def device_name(resource: str, unit_id: str) -> str:
    """The DNS label naming ``unit_id`` of ``resource`` (``example.com/serial``) in a slice."""
    short = resource.rpartition("/")[2]
    label = _DASHES.sub("-", _NOT_LABEL.sub("-", f"{short}-{unit_id}".lower())).strip("-")
    digest = hashlib.sha256(f"{resource}\0{unit_id}".encode()).hexdigest()[:_HASH_LENGTH]
    head = label[: DNS1123_LABEL_MAX - _HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest
