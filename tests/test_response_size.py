"""The Allocate answer (kubelet/servicer.py): every field encoded, and an answer over
the kubelet's message limit refused by its real size."""

from __future__ import annotations

import random

import pytest

from genericdp.allocation.plan import Allocation, DeviceSpec, Mount
from genericdp.config.model import frozen_map
from genericdp.errors import UnsafeAllocationError
from genericdp.kubelet.servicer import allocate_response
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
def test_every_answer_is_encoded_whole(longest: int) -> None:
    """Random answers of every shape, ASCII or not, empty or long: one container
    response each, with every field."""
    rng = random.Random(longest)  # noqa: S311 -- reproducible test input
    for _ in range(200 if longest < 70_000 else 10):
        answers = [allocation(rng, longest) for _ in range(rng.randint(0, 3))]
        response = allocate_response(answers)
        assert len(response.container_responses) == len(answers)
        for answer, container in zip(answers, response.container_responses, strict=True):
            assert dict(container.envs) == dict(answer.env)
            assert [d.host_path for d in container.devices] == [d.host_path for d in answer.devices]
            assert [c.name for c in container.cdi_devices] == list(answer.cdi_devices)


def test_an_answer_near_the_limit_is_measured_exactly() -> None:
    """Just under the limit is served; just over it is refused, naming the limit."""
    many = Allocation(env=frozen_map({f"K{i:07}": "v" * 20 for i in range(100_000)}))
    assert allocate_response([many]).ByteSize() <= MAX_MESSAGE_BYTES  # not refused
    more = Allocation(env=frozen_map({f"K{i:07}": "v" * 20 for i in range(130_000)}))
    with pytest.raises(UnsafeAllocationError, match="over the kubelet's 4194304-byte"):
        allocate_response([more])


def test_a_lone_surrogate_fails_as_protobuf_fails() -> None:
    """Text protobuf cannot encode fails the encoding (before the allocator commits)."""
    with pytest.raises(UnicodeEncodeError):
        allocate_response([Allocation(env=frozen_map({"K": "\udcff"}))])


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
