"""What the slice publisher writes through: the ResourceSlices of one node and driver.

``dra/kubeapi.py``'s ``ApiSlices`` keeps them in the API server; the tests keep
them in memory (``tests/dra_fakes.py``), so the publisher's rules are tested
without an API server.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any, Protocol


class SliceStore(Protocol):
    """Where the ResourceSlices of one node and driver are kept (the API server).

    Failures are ``GenericdpError`` when the server answered (a conflict, a
    refusal), any other exception when it could not be reached.
    """

    @property
    def node(self) -> str: ...

    @property
    def driver(self) -> str: ...

    async def list(self) -> dict[str, dict[str, Any]]:
        """``{name: slice}``: every slice of the node and driver."""
        ...

    def watch(self) -> AsyncIterable[tuple[str, dict[str, Any]]]:
        """``(ADDED|MODIFIED|DELETED, slice)`` as they happen, until it fails or ends."""
        ...

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj``; what the server holds now."""
        ...

    async def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace the slice at ``obj``'s ``resourceVersion``; what the server holds now."""
        ...

    async def delete(self, name: str) -> None:
        """Delete slice ``name``; one already gone is no error."""
        ...
