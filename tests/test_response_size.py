"""The Allocate answer's size bound (kubelet/servicer.py): never below the real size,
so an answer over the kubelet's message limit is always measured and refused."""

from __future__ import annotations

import random

import pytest

from genericdp.allocation.render import Allocation, DeviceSpec, Mount
from genericdp.config.model import frozen_map
from genericdp.errors import UnsafeAllocationError
from genericdp.kubelet.servicer import (
    allocate_response,
    allocate_response_size,
    allocate_response_size_bound,
    container_response,
)
from genericdp.runtime.plugin import _fits_a_message
from genericdp.unixgrpc import MAX_MESSAGE_BYTES

ALPHABET = ["a", "/", "-", "é", "€", "𝄞", "\n", ""]  # 1 to 4 bytes in UTF-8, and none


def text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, longest)))


def allocation(rng: random.Random, longest: int) -> Allocation:
    def some(n: int) -> range:
        return range(rng.randint(0, n))

    return Allocation(
        devices=tuple(
            DeviceSpec(text(rng, longest), text(rng, longest), rng.choice(["rw", "r", ""]))
            for _ in some(3)
        ),
        mounts=tuple(
            Mount(text(rng, longest), text(rng, longest), rng.random() < 0.5) for _ in some(3)
        ),
        env=frozen_map({f"K{i}{text(rng, 5)}": text(rng, longest) for i in some(4)}),
        annotations=frozen_map({f"a{i}": text(rng, longest) for i in some(2)}),
        cdi_devices=tuple(text(rng, longest) for _ in some(2)),
    )


@pytest.mark.parametrize("longest", [0, 3, 200, 70_000])
def test_the_bound_is_never_below_the_size(longest: int) -> None:
    """Random answers of every shape, ASCII or not, empty or long."""
    rng = random.Random(longest)  # noqa: S311 -- reproducible test input
    for _ in range(200 if longest < 70_000 else 10):
        answers = [allocation(rng, longest) for _ in range(rng.randint(0, 3))]
        assert allocate_response_size_bound(answers) >= allocate_response_size(answers)


def test_an_answer_near_the_limit_is_measured_exactly() -> None:
    """Over the limit by the bound, under it in fact: such an answer is served."""
    many = Allocation(env=frozen_map({f"K{i:07}": "v" * 20 for i in range(100_000)}))
    assert allocate_response_size_bound([many]) > MAX_MESSAGE_BYTES
    assert allocate_response_size([many]) <= MAX_MESSAGE_BYTES
    _fits_a_message([("u0",)], [many])  # not refused
    more = Allocation(env=frozen_map({f"K{i:07}": "v" * 20 for i in range(130_000)}))
    with pytest.raises(UnsafeAllocationError, match="over the kubelet's 4194304-byte"):
        _fits_a_message([("u0",)], [more])


def test_a_lone_surrogate_fails_as_protobuf_fails() -> None:
    """Text protobuf cannot encode raises the same error from the bound, before any claim."""
    answer = Allocation(env=frozen_map({"K": "\udcff"}))
    with pytest.raises(UnicodeEncodeError) as bound:
        allocate_response_size_bound([answer])
    with pytest.raises(UnicodeEncodeError) as built:
        allocate_response_size([answer])
    assert str(bound.value) == str(built.value)


def test_the_response_holds_every_field() -> None:
    """Filled in place, the response says what the allocation says."""
    answer = Allocation(
        devices=(DeviceSpec("/dev/a", "/dev/b", "rw"),),
        mounts=(Mount("/c", "/h", read_only=True),),
        env=frozen_map({"A": "1"}),
        annotations=frozen_map({"x": "y"}),
        cdi_devices=("vendor.com/class=u0",),
    )
    response = allocate_response([answer, Allocation()])
    assert len(response.container_responses) == 2
    first = response.container_responses[0]
    assert first == container_response(answer)
    assert dict(first.envs) == {"A": "1"}
    assert dict(first.annotations) == {"x": "y"}
    assert [(m.container_path, m.host_path, m.read_only) for m in first.mounts] == [
        ("/c", "/h", True)
    ]
    assert [(d.container_path, d.host_path, d.permissions) for d in first.devices] == [
        ("/dev/a", "/dev/b", "rw")
    ]
    assert [c.name for c in first.cdi_devices] == ["vendor.com/class=u0"]
    assert response.container_responses[1].ByteSize() == 0
