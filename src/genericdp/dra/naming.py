"""Names the DRA backend publishes: the driver, and one device name per unit.

A ResourceSlice device name must be a DNS-1123 label (at most 63 characters
of ``[a-z0-9-]``, alphanumeric at both ends) and unique within the node's
pool, which holds the devices of every resource the node serves. A unit's
stable ID is none of that (``usb-FTDI_FT232R_A1B2:1``), so the name is the
resource's short name and the ID, lowercased with every other character
made ``-``. Whenever that loses anything (case, characters, length), eight
hex digits of a hash of the exact resource and ID are appended, so two
units whose IDs differ only in what was lost never share a name, and the
same unit always gets the same name.
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
    plain = f"{short}-{unit_id}"
    label = _DASHES.sub("-", _NOT_LABEL.sub("-", plain.lower())).strip("-")
    if label == plain and len(label) <= DNS1123_LABEL_MAX:
        return label
    digest = hashlib.sha256(f"{resource}\0{unit_id}".encode()).hexdigest()[:_HASH_LENGTH]
    keep = DNS1123_LABEL_MAX - _HASH_LENGTH - 1
    head = label[:keep].rstrip("-")
    return f"{head}-{digest}" if head else digest
