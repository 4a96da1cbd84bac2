"""An allocation as people read it: what `discover` and `simulate` print."""

from __future__ import annotations

from genericdp.allocation.render import Allocation


def allocation_lines(allocation: Allocation, indent: str = "    ") -> list[str]:
    """One line per device, mount, variable, annotation and CDI name, in that order."""
    lines = [
        f"{indent}device {d.container_path} (host {d.host_path}, {d.permissions})"
        for d in allocation.devices
    ]
    lines += [
        f"{indent}mount  {m.container_path} (host {m.host_path}{', ro' if m.read_only else ''})"
        for m in allocation.mounts
    ]
    lines += [f"{indent}env    {k}={v}" for k, v in allocation.env.items()]
    lines += [f"{indent}annot. {k}={v}" for k, v in allocation.annotations.items()]
    lines += [f"{indent}cdi    {name}" for name in allocation.cdi_devices]
    return lines
