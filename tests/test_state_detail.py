"""DeviceState's changes of any kind and probe messages (what a DRA edge follows):
they wake ``next_change`` without moving the device list's version, which
ListAndWatch follows."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from genericdp.config.model import frozen_map
from genericdp.runtime.state import DeviceState
from tests.runtime_harness import unit


def test_probe_messages_are_a_change_but_not_of_the_version() -> None:
    """A new failure message wakes the change waiters; the same again does not."""
    state = DeviceState(units=[unit("a"), unit("b")])
    state.expect_probes(True)
    version, changed = state.version, state.next_change()
    state.note_probe("a", "exited 3: no carrier")
    assert changed.is_set()
    assert state.version == version
    assert dict(state.probe_messages) == {"a": "exited 3: no carrier"}
    again = state.next_change()
    state.note_probe("a", "exited 3: no carrier")  # the same again: nothing moves
    assert not again.is_set()
    state.note_probe("a", None)
    assert dict(state.probe_messages) == {}
    assert state.version == version


def test_a_first_failed_probe_is_a_change_but_not_of_the_version() -> None:
    """Unhealthy before (never probed) and after (failed): same list, a change all the same."""
    state = DeviceState(units=[unit("a")])
    state.expect_probes(True)
    assert state.unhealthy == {"a"}
    assert state.probed == frozenset()
    version, changed = state.version, state.next_change()
    assert not state.set_unhealthy({"a"}, probed={"a"})
    assert state.probed == {"a"}
    assert state.version == version
    assert changed.is_set()


def test_messages_of_units_gone_are_dropped() -> None:
    state = DeviceState(units=[unit("a"), unit("b")])
    state.note_probe("a", "timed out")
    state.note_probe("b", "exited 1")
    state.set_units([unit("b")])
    assert dict(state.probe_messages) == {"b": "exited 1"}
    assert DeviceState().probed is None  # no probe: nothing to wait for


async def test_a_rescan_that_finds_the_same_units_wakes_nobody() -> None:
    """Equal units again (new objects, as every rescan makes) move neither version
    and wake no waiter; a unit that differs in anything does."""
    state = DeviceState(units=[unit("a")])
    version = state.version
    woken = asyncio.create_task(state.next_change().wait())
    await asyncio.sleep(0)
    assert not state.set_units([unit("a")])
    await asyncio.sleep(0)
    assert not woken.done(), "nothing changed: no ListAndWatch or DRA edge wakes"
    assert state.version == version
    assert not state.set_units([replace(unit("a"), attributes=frozen_map({"vendor": "x"}))])
    assert await woken, "same list, a change all the same: an attribute changed"
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
