"""Hooks: user commands run around a container's use of units.

A hook sees its units in ``GENERICDP_*`` variables (docs/hooks.md); its output goes
to our log. A failed hook raises ``HookRunError``, whose message is for a pod's
events: which hook, for which units, how it ended, the last thing it printed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from genericdp import logsetup
from genericdp.config.model import Exec, ResourceDefinition
from genericdp.discovery.model import Unit
from genericdp.errors import HookError, first_of
from genericdp.hooks.execution import ExecResult, run_exec

# The names the daemon passes as ``name``/``hook`` (GENERICDP_HOOK); config spelling.
INIT = "init"
PRE_START = "preStart"
CLEANUP = "cleanup"
HEALTH = "health"

_MAX_IDS_IN_MESSAGE = 3  # a message in a pod event must stay short

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HookRun:
    """One run of hook ``name`` (``init``, ``preStart``, ``cleanup``) for ``units``."""

    name: str
    spec: Exec
    resource: str
    units: Sequence[Unit]
    device_ids: Sequence[str] = ()
    node_name: str = ""
    logger: logging.Logger | None = None  # the resource's, so its lines say which

    @classmethod
    def of(
        cls,
        name: str,
        definition: ResourceDefinition,
        units: Sequence[Unit],
        device_ids: Sequence[str] = (),
        *,
        node_name: str = "",
        logger: logging.Logger | None = None,
    ) -> HookRun | None:
        """The run of ``definition``'s hook ``name`` for ``units`` (None: it has none); every
        backend makes its runs here, so every hook sees the same variables."""
        hooks = definition.hooks
        spec = {INIT: hooks.init, PRE_START: hooks.pre_start, CLEANUP: hooks.cleanup}[name]
        if spec is None:
            return None
        return cls(name, spec, definition.name, units, device_ids, node_name, logger)


class HookRunner(Protocol):
    """``run_hook``, or a stand-in (``TimedHooks``, tests) that runs ``hook`` its way."""

    async def __call__(self, hook: HookRun) -> object: ...


class HookRunError(HookError):
    """A hook exited non-zero, was killed, timed out or could not start."""

    def __init__(self, message: str, result: ExecResult) -> None:
        super().__init__(message)
        self.result = result


def unit_env(
    resource: str,
    units: Sequence[Unit],
    *,
    device_ids: Sequence[str] = (),
    node_name: str = "",
    hook: str = "",
) -> dict[str, str]:
    """The units in ``GENERICDP_*`` variables, each always set (a script may ``set -u``);
    lists are comma separated, in unit order, without duplicates."""
    units = _unique_units(units)
    env = {
        "GENERICDP_RESOURCE": resource,
        "GENERICDP_HOOK": hook,
        "GENERICDP_NODE_NAME": node_name,
        "GENERICDP_UNIT_IDS": ",".join(u.id for u in units),
        "GENERICDP_DEVICE_IDS": ",".join(device_ids),
        "GENERICDP_DEVICE_PATHS": _join(n.host_path for u in units for n in u.nodes),
        "GENERICDP_CONTAINER_PATHS": _join(n.container_path for u in units for n in u.nodes),
    }
    if len(units) == 1:
        (unit,) = units
        env["GENERICDP_UNIT_ID"] = unit.id
        if unit.numa_node is not None:
            env["GENERICDP_NUMA_NODE"] = str(unit.numa_node)
    return env


async def run_hook(hook: HookRun) -> ExecResult:
    """Run ``hook`` (log fields ``resource``, ``unit``); its result, or HookRunError."""
    name, spec, resource, units = hook.name, hook.spec, hook.resource, hook.units
    log = hook.logger or _log
    unit_ids = [u.id for u in _unique_units(units)]
    ids = _ids_text(unit_ids)
    env = unit_env(resource, units, device_ids=hook.device_ids, node_name=hook.node_name, hook=name)
    unit = {"unit": unit_ids[0]} if len(unit_ids) == 1 else {}
    with logsetup.fields(resource=resource, **unit):
        log.info(
            "%s hook %s for %s %s: starting", name, spec.argv[0] if spec.argv else "", resource, ids
        )
        result = await run_exec(spec, env=env)
        for line in result.output.splitlines():
            log.info("%s hook [%s]: %s", name, resource, line)
        if result.ok:
            log.info("%s hook for %s %s: done in %.3fs", name, resource, ids, result.duration)
            return result
        # init hook /usr/bin/x for example.com/serial unit A1B2 exited 3: <last line>
        how = f"timed out after {spec.timeout:g}s" if result.timed_out else result.describe()
        if (last := result.last_line()) and result.error is None:
            how += f": {last}"
        program = spec.argv[0] if spec.argv else "<empty argv>"
        message = f"{name} hook {program} for {resource} {ids} {how}"
        level = logging.ERROR if result.error is not None else logging.WARNING
        log.log(level, "%s (after %.3fs)", message, result.duration)
        raise HookRunError(message, result)


def _ids_text(ids: Sequence[str]) -> str:
    if not ids:
        return "(no units)"
    if len(ids) == 1:
        return f"unit {ids[0]}"
    return f"units {first_of(ids, _MAX_IDS_IN_MESSAGE)}"


def _unique_units(units: Sequence[Unit]) -> list[Unit]:
    """Units in order, each once (replicas of one unit arrive as the same unit)."""
    seen: dict[str, Unit] = {}
    for unit in units:
        seen.setdefault(unit.id, unit)
    return list(seen.values())


def _join(paths: Iterable[str]) -> str:
    return ",".join(dict.fromkeys(paths))  # in order, each once
