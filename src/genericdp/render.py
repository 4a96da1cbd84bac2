"""Templates -> allocation: a pure function from (definition, units) to what a
container receives. INTERFACE ONLY: the implementation is being written.

Templates are Jinja2 sources from ``AllocateSpec``; they are compiled once at
load time by ``compile_templates`` in a sandboxed environment with
``StrictUndefined`` so that syntax errors and unknown top-level names are
validation errors, and rendered per allocation by ``render_allocation``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from genericdp.config.model import AllocateSpec, ResourceDefinition, frozen_map
from genericdp.discovery.model import Unit


@dataclass(frozen=True)
class DeviceSpec:
    """A device node a container receives (kubelet ``DeviceSpec``)."""

    container_path: str
    host_path: str
    permissions: str


@dataclass(frozen=True)
class Mount:
    """A host path mounted into the container (kubelet ``Mount``)."""

    container_path: str
    host_path: str
    read_only: bool


@dataclass(frozen=True)
class Allocation:
    """Everything one container receives for the units allocated to it."""

    devices: tuple[DeviceSpec, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class TemplateProblem:
    """One template that does not compile; ``key`` is relative to ``allocate``
    (``env.SERIAL_PORTS``, ``mounts[0].hostPath``, ``annotations.foo``)."""

    key: str
    message: str
    line: int | None = None  # line within the template source, 1-based


class TemplateSyntaxErrors(Exception):  # noqa: N818 - a collection, raised at load time only
    """Raised by ``compile_templates`` with every template that failed."""

    def __init__(self, problems: Sequence[TemplateProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.key}: {p.message}" for p in self.problems))


class CompiledTemplates:
    """The compiled form of an ``AllocateSpec``."""


def compile_templates(spec: AllocateSpec) -> CompiledTemplates:
    raise NotImplementedError


def render_allocation(
    definition: ResourceDefinition, units: Sequence[Unit], *, node_name: str = ""
) -> Allocation:
    raise NotImplementedError
