"""A slow template never blocks the event loop: Allocate renders in a worker thread."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from genericdp.config.sandbox import MAX_RENDER_SECONDS
from genericdp.kubelet.embedded import AllocationError
from tests.runtime_harness import ScriptedDiscovery, config, running, unit

NAME = "example.com/slow"
# Slow in small steps: stopped by the render deadline, not by a size limit
# (the same shape as test_render_sandbox.test_rendering_has_a_deadline).
SLOW = (
    "{% for i in 'x' * 300 %}{% for j in 'x' * 300 %}"
    "{% if (j ~ ' a b c d e f g h i j k l m n o p q r s t u v w x y z') | wordwrap(1) %}"
    "{% endif %}{% endfor %}{% endfor %}"
)


async def test_a_slow_template_does_not_stall_the_loop(base: Path) -> None:
    """While one Allocate renders to its deadline, the loop keeps ticking every few ms."""
    cfg = config(
        f"resources:\n- name: {NAME}\n  match: [{{glob: /dev/u0}}]\n"
        f'  allocate:\n    env: {{SLOW: "{SLOW}"}}\n'
    )
    discovery = ScriptedDiscovery({NAME: [unit("u0")]})
    async with running(base, cfg, discover=discovery) as rt:
        await rt.until(lambda k: NAME in k.resources and k.resources[NAME].allocatable == 1)
        gaps: list[float] = []
        stop = asyncio.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        try:
            with pytest.raises(AllocationError, match="took longer than"):
                await rt.kubelet.allocate(NAME, 1, pod="p")
        finally:
            stop.set()
            await ticker
        assert time.monotonic() - started >= MAX_RENDER_SECONDS
        assert max(gaps) < MAX_RENDER_SECONDS / 2, f"the loop stalled for {max(gaps):.3f}s"
