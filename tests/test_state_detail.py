"""DeviceState's detail version and probe messages (what a DRA edge follows):
they move without moving the device list's version, which ListAndWatch follows."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from genericdp.config.model import frozen_map
from genericdp.runtime.state import DeviceState
from tests.runtime_harness import unit


def test_probe_messages_move_the_detail_not_the_version() -> None:
    state = DeviceState(units=[unit("a"), unit("b")])
    state.expect_probes(True)
    version, detail = state.version, state.detail
    state.note_probe("a", "exited 3: no carrier")
    assert (state.version, state.detail) == (version, detail + 1)
    assert dict(state.probe_messages) == {"a": "exited 3: no carrier"}
    state.note_probe("a", "exited 3: no carrier")  # the same again: nothing moves
    assert state.detail == detail + 1
    state.note_probe("a", None)
    assert dict(state.probe_messages) == {}
    assert state.version == version


def test_a_first_failed_probe_moves_only_the_detail() -> None:
    """Unhealthy before (never probed) and after (failed): same list, new detail."""
    state = DeviceState(units=[unit("a")])
    state.expect_probes(True)
    assert state.unhealthy == {"a"}
    assert state.probed == frozenset()
    version, detail = state.version, state.detail
    assert not state.set_unhealthy({"a"}, probed={"a"})
    assert state.probed == {"a"}
    assert state.version == version
    assert state.detail > detail


def test_messages_of_units_gone_are_dropped() -> None:
    state = DeviceState(units=[unit("a"), unit("b")])
    state.note_probe("a", "timed out")
    state.note_probe("b", "exited 1")
    state.set_units([unit("b")])
    assert dict(state.probe_messages) == {"b": "exited 1"}
    assert DeviceState().probed is None  # no probe: nothing to wait for


async def test_a_rescan_that_finds_the_same_units_wakes_nobody() -> None:
    """Equal units again (new objects, as every rescan makes) move neither version
    nor detail and wake no waiter; a unit that differs in anything does."""
    state = DeviceState(units=[unit("a")])
    version, detail = state.version, state.detail
    woken = asyncio.create_task(state.wait_detail(detail))
    await asyncio.sleep(0)
    assert not state.set_units([unit("a")])
    await asyncio.sleep(0)
    assert not woken.done(), "nothing changed: no ListAndWatch or DRA edge wakes"
    assert (state.version, state.detail) == (version, detail)
    assert not state.set_units([replace(unit("a"), attributes=frozen_map({"vendor": "x"}))])
    assert await woken == detail + 1, "same list, new detail: an attribute changed"
    assert state.version == version


def test_a_held_unit_that_came_back_leaves_the_gone_set() -> None:
    """The fast path keeps the gone bookkeeping: a vanished held unit stays listed,
    and the same units again with it back present clear it."""
    state = DeviceState(units=[unit("a"), unit("b")])
    state.set_in_use(["b"])
    assert state.set_units([unit("a")])
    assert state.gone == {"b"}
    assert not state.set_units([unit("a")]), "the same again: nothing changed"
    assert state.gone == {"b"}
    assert state.set_units([unit("a"), unit("b")])
    assert state.gone == frozenset()
