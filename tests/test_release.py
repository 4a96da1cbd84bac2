"""Release tracking: the pure diff, the usage tracker and the PodResources poller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path

import pytest

from genericdp.deviceplugin.holders import released_units
from genericdp.deviceplugin.poller import ReleasePoller
from genericdp.deviceplugin.usage import UsageTracker
from genericdp.errors import KubeletError
from genericdp.kubelet.podresources import PodDevices
from genericdp.runtime.owed import Release
from tests.polling import eventually

R = "example.com/serial"
S = "example.com/sound"


def _pod(pod: str, *ids: str, resource: str = R, container: str = "main") -> PodDevices:
    return PodDevices("default", pod, container, resource, tuple(ids))


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        pytest.param({}, {}, (), id="nothing"),
        pytest.param({R: {"a"}}, {R: {"a"}}, (), id="still-held"),
        pytest.param({R: {"a"}}, {}, (Release(R, "a", ("a",)),), id="resource-gone-from-list"),
        pytest.param({R: {"a", "b"}}, {R: {"b"}}, (Release(R, "a", ("a",)),), id="one-of-two"),
        pytest.param({}, {R: {"a"}}, (), id="newly-taken"),
        pytest.param({R: {"a::0", "a::1"}}, {R: {"a::1"}}, (), id="shared-one-replica-left"),
        pytest.param(
            {R: {"a::0", "a::1"}},
            {R: set()},
            (Release(R, "a", ("a::0", "a::1")),),
            id="shared-last",
        ),
        pytest.param({R: {"a::0"}}, {R: {"a::1"}}, (), id="shared-replica-swapped"),
        pytest.param(
            {R: {"a"}, S: {"x"}},
            {S: {"x"}},
            (Release(R, "a", ("a",)),),
            id="per-resource",
        ),
        pytest.param(
            {R: {"a"}}, {S: {"a"}}, (Release(R, "a", ("a",)),), id="same-id-other-resource"
        ),
        pytest.param(
            {R: {"b", "a::0"}, S: {"z"}},
            {},
            (Release(R, "a", ("a::0",)), Release(R, "b", ("b",)), Release(S, "z", ("z",))),
            id="sorted",
        ),
    ],
)
def test_released_units(
    previous: Mapping[str, AbstractSet[str]],
    current: Mapping[str, AbstractSet[str]],
    expected: tuple[Release, ...],
) -> None:
    """A unit is released when its last in-use replica leaves the list, per resource."""
    assert released_units(previous, current) == expected


def test_first_list_is_a_baseline() -> None:
    """What was in use before the first List is not released by it, and nothing before it."""
    tracker = UsageTracker()
    assert not tracker.has_baseline
    assert tracker.observe([_pod("p", "a")]) == ()
    assert tracker.has_baseline
    assert tracker.in_use(R) == {"a"}
    assert tracker.observe([]) == (Release(R, "a", ("a",)),)
    assert tracker.in_use(R) == frozenset()


def test_holders_of_one_device_release_it_together() -> None:
    """An init-reused device listed under two containers is released when both are gone."""
    tracker = UsageTracker()
    tracker.observe([_pod("p", "a", container="init"), _pod("p", "a")])
    assert tracker.observe([_pod("p", "a")]) == ()
    assert tracker.observe([]) == (Release(R, "a", ("a",)),)


def test_handed_out_stays_in_use_until_listed_then_follows_list() -> None:
    """An ID our Allocate gave out is in use while unlisted; once listed, List decides."""
    tracker = UsageTracker()
    tracker.observe([])
    tracker.handed_out(R, ["a"])
    assert tracker.observe([]) == ()
    assert tracker.observe([]) == ()
    assert tracker.in_use(R) == {"a"}  # a plain init container's device is never listed
    tracker.observe([_pod("p", "a")])
    assert tracker.observe([]) == (Release(R, "a", ("a",)),)


def test_claim_of_an_unlisted_hand_out_releases_it() -> None:
    """The kubelet asking again for an ID we gave out (never listed) means it is free."""
    tracker = UsageTracker()
    tracker.observe([])
    tracker.handed_out(R, ["a"])
    assert tracker.claim(R, ["a"]) == (Release(R, "a", ("a",)),)
    assert tracker.claim(R, ["a"]) == ()  # nobody held it in between


def test_claim_before_the_poll_releases_and_ignores_the_old_holder() -> None:
    """A claimed ID still listed for its old pod (terminated, not deleted) no longer counts."""
    tracker = UsageTracker()
    tracker.observe([_pod("old", "a")])
    assert tracker.claim(R, ["a"]) == (Release(R, "a", ("a",)),)
    tracker.handed_out(R, ["a"])
    # List still shows the old pod: the old holder is ignored, our hand-out stands.
    assert tracker.observe([_pod("old", "a")]) == ()
    assert tracker.in_use(R) == {"a"}
    tracker.observe([_pod("old", "a"), _pod("new", "a")])
    assert tracker.observe([_pod("old", "a")]) == (Release(R, "a", ("a",)),)


def test_stale_holder_forgotten_once_unlisted() -> None:
    """A pod of the same name that comes back later is a holder again (List has no UID)."""
    tracker = UsageTracker()
    tracker.observe([_pod("web-0", "a")])
    tracker.claim(R, ["a"])
    tracker.observe([])  # the old web-0 is gone from List
    tracker.observe([_pod("web-0", "a")])
    assert tracker.in_use(R) == {"a"}
    assert tracker.observe([]) == (Release(R, "a", ("a",)),)


def test_claim_of_one_replica_keeps_a_shared_unit_in_use() -> None:
    """Claiming a freed replica of a unit another pod still shares releases nothing."""
    tracker = UsageTracker()
    tracker.observe([_pod("p", "a::0"), _pod("q", "a::1")])
    assert tracker.claim(R, ["a::0"]) == ()
    assert tracker.in_use(R) == {"a::1"}


def test_forget_keeps_hand_outs_and_starts_a_new_baseline() -> None:
    """With no cleanup wanted the List view is dropped; the next List is a baseline."""
    tracker = UsageTracker()
    tracker.observe([_pod("p", "a")])
    tracker.handed_out(R, ["b"])
    tracker.forget()
    assert not tracker.has_baseline
    assert tracker.in_use(R) == {"b"}
    assert tracker.observe([]) == ()
    assert tracker.has_baseline


class _ScriptedList:
    """PodResources answers (or errors) in order; the last one repeats."""

    def __init__(self, *answers: tuple[PodDevices, ...] | KubeletError) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def __call__(
        self,
        socket: Path,  # noqa: ARG002 -- the ListPods signature
        *,
        timeout: float = 5.0,  # noqa: ARG002, ASYNC109 -- the ListPods signature
        resources: AbstractSet[str] | None = None,  # noqa: ARG002 -- the ListPods signature
    ) -> tuple[PodDevices, ...]:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, KubeletError):
            raise answer
        return answer


def _poller(
    lister: _ScriptedList,
    out: list[Release],
    *,
    active: bool = True,
    on_observed: Callable[[], None] = lambda: None,
) -> tuple[ReleasePoller, UsageTracker]:
    tracker = UsageTracker()
    poller = ReleasePoller(
        Path("/nonexistent/pod-resources.sock"),
        tracker,
        out.extend,
        interval=0.01,
        active=lambda: active,
        on_observed=on_observed,
        list_pods=lister,
    )
    return poller, tracker


async def test_poller_failed_list_changes_nothing_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failing List keeps the last view, releases nothing, and is logged once per outage."""
    down = KubeletError("PodResources List on x failed: UNAVAILABLE: no socket")
    lister = _ScriptedList((_pod("p", "a"),), down, down, down, ())
    out: list[Release] = []
    poller, tracker = _poller(lister, out)
    caplog.set_level(logging.INFO, logger="genericdp.deviceplugin.poller")
    assert await poller.poll()
    for _ in range(3):
        assert not await poller.poll()
    assert out == []
    assert tracker.in_use(R) == {"a"}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "UNAVAILABLE: no socket" in warnings[0].getMessage()
    assert await poller.poll()
    assert out == [Release(R, "a", ("a",))]
    assert any("answers again" in r.getMessage() for r in caplog.records)


async def test_poller_starts_with_a_baseline_after_an_outage_at_start() -> None:
    """When List fails from the start, its first answer is the baseline (nothing released)."""
    lister = _ScriptedList(KubeletError("down"), (_pod("p", "a"),), ())
    out: list[Release] = []
    poller, _ = _poller(lister, out)
    assert not await poller.poll()
    assert await poller.poll()
    assert out == []
    assert await poller.poll()
    assert out == [Release(R, "a", ("a",))]


async def test_poller_idle_without_cleanup_hooks() -> None:
    """No resource wants cleanup: List is not called at all."""
    lister = _ScriptedList(())
    out: list[Release] = []
    poller, tracker = _poller(lister, out, active=False)
    assert not await poller.poll()
    assert lister.calls == 0
    assert not tracker.has_baseline


def test_held_drops_a_handed_out_id_a_whole_later_list_did_not_show() -> None:
    """``held`` (the device list's view) forgets an ID our Allocate gave out once a
    List begun after the hand-out did not show it; ``in_use`` (cleanup's) keeps it."""
    tracker = UsageTracker()
    tracker.observe([])  # baseline
    tracker.handed_out(R, ["a", "b"])
    assert tracker.held(R) == {"a", "b"}
    tracker.observe([_pod("p", "a")])  # may have begun before the hand-out
    assert tracker.held(R) == {"a", "b"}
    tracker.observe([_pod("p", "a")])  # began after it: b's pod is gone (or never listed)
    assert tracker.held(R) == {"a"}
    assert tracker.in_use(R) == {"a", "b"}, "cleanup still waits for b"
    tracker.handed_out(R, ["b"])  # handed out again: held again
    assert tracker.held(R) == {"a", "b"}


def test_watch_hears_of_allocations_not_of_lists() -> None:
    """A watcher is called when an Allocate hands IDs out or claims them, until unwatched."""
    tracker = UsageTracker()
    calls: list[str] = []
    tracker.watch(R, lambda: calls.append("changed"))
    tracker.observe([_pod("p", "a")])
    assert calls == []
    tracker.handed_out(R, ["b"])
    assert calls == ["changed"]
    tracker.claim(R, ["a"])
    assert calls == ["changed", "changed"]
    tracker.claim(R, ["zzz"])  # held by nobody: nothing changed
    assert len(calls) == 2
    tracker.watch(R, None)
    tracker.handed_out(R, ["c"])
    assert len(calls) == 2


async def test_poller_unchanged_list_does_no_per_resource_work() -> None:
    """A List that repeats the last answer while nothing else changed does not reach
    ``on_observed`` (each resource's device list); anything that may change
    what a resource lists does: a new answer, a hand-out (until a whole List
    after it has answered), a claim, a new baseline."""
    a, b = (_pod("p", "a"),), (_pod("p", "a"), _pod("q", "b"))
    lister = _ScriptedList(a, a, a, b, b, b, b, b, b, b, b, b)
    observed: list[int] = []
    out: list[Release] = []
    poller, tracker = _poller(lister, out, on_observed=lambda: observed.append(lister.calls))

    async def polls(n: int) -> list[int]:
        observed.clear()
        for _ in range(n):
            assert await poller.poll()
        return observed

    assert await polls(3) == [1], "the baseline, then two repeats"
    assert await polls(2) == [4], "a new answer, then a repeat"
    tracker.handed_out(R, ["c"])
    assert await polls(3) == [6, 7], "the hand-out: the List after it, and the whole one after"
    assert tracker.held(R) == {"a", "b"}, "a whole List did not show c"
    assert tracker.in_use(R) == {"a", "b", "c"}
    assert tracker.claim(R, ["b"]) == (Release(R, "b", ("b",)),)
    assert await polls(2) == [9], "after a claim"
    tracker.forget()
    assert await polls(2) == [11], "a new baseline"
    assert out == [], "nothing released meanwhile"
    assert lister.calls == 12


async def test_poller_repeated_lists_keep_releasing_and_dropping_hand_outs() -> None:
    """With the fast path, what Lists tell still reaches the tracker: a hand-out no
    List shows leaves ``held`` after a whole List, and a release is dispatched."""
    a = (_pod("p", "a"),)
    lister = _ScriptedList((), (), (), a, a, ())
    out: list[Release] = []
    poller, tracker = _poller(lister, out)
    assert await poller.poll()  # baseline: nothing held
    tracker.handed_out(R, ["a"])
    assert await poller.poll()  # may have begun before the hand-out
    assert tracker.held(R) == {"a"}
    assert await poller.poll()  # began after it: a's holder is not listed (yet)
    assert tracker.held(R) == set()
    assert tracker.in_use(R) == {"a"}, "cleanup still waits for a"
    assert await poller.poll()  # listed now
    assert await poller.poll()  # repeated
    assert tracker.held(R) == {"a"}
    assert out == []
    assert await poller.poll()
    assert out == [Release(R, "a", ("a",))]
    assert tracker.held(R) == set()


def test_holds_nothing_follows_lists_and_hand_outs() -> None:
    """Nothing held: a List answered, showed no holder of any resource, and our
    Allocate gave nothing out that no List confirmed yet."""
    tracker = UsageTracker()
    assert not tracker.holds_nothing(), "no List yet: unknown"
    tracker.observe([])
    assert tracker.holds_nothing()
    tracker.handed_out(R, ["a"])
    assert not tracker.holds_nothing()
    tracker.observe([_pod("p", "a")])
    assert not tracker.holds_nothing()
    tracker.observe([])
    assert tracker.holds_nothing()
    tracker.observe([_pod("gpu", "g0", resource="nvidia.com/gpu")])
    assert not tracker.holds_nothing(), "another plugin's devices count too"
    tracker.observe([])
    assert tracker.holds_nothing()


async def test_poller_rests_while_nothing_is_held_and_an_allocate_wakes_it() -> None:
    """With nothing held the poller makes no List until a hand-out (or its ``rest``),
    then polls again; while anything is held it polls every interval."""
    idle_list, busy_list = _ScriptedList(()), _ScriptedList((_pod("p", "a"),))
    idle_tracker, busy_tracker = UsageTracker(), UsageTracker()
    pollers = [
        ReleasePoller(
            Path("/nonexistent/pod-resources.sock"),
            tracker,
            lambda _releases: None,
            interval=0.001,
            rest=3600.0,
            list_pods=lister,
        )
        for tracker, lister in ((idle_tracker, idle_list), (busy_tracker, busy_list))
    ]
    tasks = [asyncio.create_task(p.run()) for p in pollers]
    try:
        # The busy poller's 20 Lists take at least 20 intervals: the idle one's
        # first List answered nothing held, so it made no second.
        await eventually(lambda: busy_list.calls >= 20 and idle_list.calls >= 1)
        assert idle_list.calls == 1
        assert idle_tracker.holds_nothing()
        idle_tracker.handed_out(R, ["a"])  # an Allocate
        await eventually(lambda: idle_list.calls >= 3)  # polling while "a" is handed out
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_poller_rest_is_a_safety_net() -> None:
    """Resting, the poller still lists every ``rest`` seconds (never less than ``interval``)."""
    lister = _ScriptedList(())
    poller = ReleasePoller(
        Path("/nonexistent/pod-resources.sock"),
        UsageTracker(),
        lambda _releases: None,
        interval=0.001,
        rest=0.001,
        list_pods=lister,
    )
    task = asyncio.create_task(poller.run())
    try:
        await eventually(lambda: lister.calls >= 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class _KubeletView:
    """A List that answers what the kubelet holds now (``pods``), counting calls."""

    def __init__(self) -> None:
        self.pods: tuple[PodDevices, ...] = ()
        self.calls = 0
        self.seen = asyncio.Event()  # set once an answer held something

    async def __call__(
        self,
        socket: Path,  # noqa: ARG002 -- the ListPods signature
        *,
        timeout: float = 5.0,  # noqa: ARG002, ASYNC109 -- the ListPods signature
        resources: AbstractSet[str] | None = None,  # noqa: ARG002 -- the ListPods signature
    ) -> tuple[PodDevices, ...]:
        self.calls += 1
        if self.pods:
            self.seen.set()
        return self.pods


async def test_poller_looks_for_a_hand_out_soon_so_a_short_pod_is_cleaned_at_its_end() -> None:
    """A pod that lives far less than one interval is listed and released: the
    hand-out wakes the poller, which lists ``CONFIRM`` seconds later and at
    doubling gaps until it shows the IDs, then follows the kubelet's view."""
    view = _KubeletView()
    out: list[Release] = []
    tracker = UsageTracker()
    poller = ReleasePoller(
        Path("/nonexistent/pod-resources.sock"),
        tracker,
        out.extend,
        interval=3600.0,
        rest=3600.0,
        list_pods=view,
    )
    task = asyncio.create_task(poller.run())
    try:
        await eventually(tracker.holds_nothing)  # the baseline, then rest
        view.pods = (_pod("short", "a"),)  # the kubelet records our Allocate's IDs
        tracker.handed_out(R, ["a"])
        await eventually(view.seen.is_set, "a List after the hand-out")
        await eventually(lambda: not tracker.awaiting_list())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert view.calls == 2, "the baseline and one List CONFIRM seconds after the hand-out"
    view.pods = ()  # the pod ended, long before an interval: the next List releases it
    assert await poller.poll()
    assert out == [Release(R, "a", ("a",))]
