"""The argument parser of ``genericdp``: its commands and their flags, one flag per
field of the settings model (``genericdp.settings``). ``convert`` takes its own
arguments, spelled as squat/generic-device-plugin's flags so an args list can be pasted.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from genericdp import __version__
from genericdp.settings import (
    CLASS_SETTINGS_SHARED,
    SIMULATE_SKIPS,
    ClassSettings,
    DiscoverySettings,
    Settings,
)

# squat/generic-device-plugin's flags that configure its daemon, not its devices.
SQUAT_DAEMON_FLAGS = ("listen", "log-level", "plugin-directory")


def flag(name: str) -> str:
    """The flag of setting ``name`` (``cdi_dir`` -> ``--cdi-dir``)."""
    return "--" + name.replace("_", "-")


def _setting_flags(
    p: argparse.ArgumentParser, model: type[BaseModel], *, skip: frozenset[str] = frozenset()
) -> None:
    """One flag per field of ``model`` (but ``skip``); the command reads them from
    ``args.settings`` and hands those given to the model, over GENERICDP_*."""
    g = p.add_argument_group("settings (each also a GENERICDP_* variable; a flag wins)")
    names = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        kind = field.annotation
        default = f"{field.default}" if field.default != "" else "empty"
        help_text = f"{field.description} (GENERICDP_{name.upper()}; default {default})"
        # A Literal's values are choices; any other type (Path, float, str) converts the text.
        kwargs: dict[str, Any] = (
            {"choices": get_args(kind)} if get_origin(kind) is Literal else {"type": kind}
        )
        g.add_argument(flag(name), dest=name, help=help_text, **kwargs)
        names.append(name)
    p.set_defaults(settings=tuple(names))


def _add_convert(sub: Any) -> None:
    """``convert``: its own arguments, spelled as squat's flags (paste an args list)."""
    p = sub.add_parser(
        "convert",
        help="print the genericdp config equivalent to a squat/generic-device-plugin config",
        description="Reads squat/generic-device-plugin's --device flags and/or its --config"
        " file and prints genericdp config v1 YAML; differences are NOTE comments and"
        " warnings on stderr. Exits 0 when everything converted, 1 on invalid input,"
        " and 4 when the YAML is written but part of squat's config is NOT CONVERTED.",
    )
    p.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="JSON_OR_YAML",
        help="one of squat's --device values; repeat it as squat's flag is repeated",
    )
    p.add_argument("--config", type=Path, metavar="FILE", help="squat's YAML or JSON config")
    p.add_argument("--domain", help="squat's --domain (default: the file's, else squat.ai)")
    p.add_argument("--output", "-o", type=Path, metavar="FILE", help="write here, not stdout")
    squat_daemon = p.add_argument_group(
        "squat's daemon flags (accepted so an args list can be pasted; each becomes a NOTE)"
    )
    for name in SQUAT_DAEMON_FLAGS:
        squat_daemon.add_argument(f"--{name}", dest=name.replace("-", "_"), metavar="VALUE")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="genericdp",
        description="A generic Kubernetes device plugin: any hardware schedulable from YAML.",
    )
    parser.add_argument("--version", action="version", version=f"genericdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "validate",
        help="check config files or directories; exit 1 if invalid",
        description="Checks config files and directories together, as one config (what"
        " the daemon makes of a ConfigMap's files; --each: each PATH on its own, as"
        " separate configs, e.g. configs/examples/*.yaml), and rendered manifests (each"
        " ConfigMap's *.yaml/*.yml keys together, as its pod reads them) and Helm values"
        " files (what the chart writes to its ConfigMap) each on their own.",
    )
    together = p.add_mutually_exclusive_group()
    together.add_argument(
        "--merged",
        dest="each",
        action="store_false",
        help="check the PATHs together as one config, as the daemon reads a config"
        " directory: a resource name may appear once in all of them (the default)",
    )
    together.add_argument(
        "--each",
        dest="each",
        action="store_true",
        help="check each PATH (a file, or a directory as one config) on its own",
    )
    p.set_defaults(each=False)
    p.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH",
        help="a config file or directory, or a manifest (a file with a top-level kind:)",
    )  # fmt: skip
    p.add_argument(
        "--helm-values",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a Helm values file for the chart: its configYaml, else config, and"
        " extraConfigFiles (repeatable)",
    )
    p.add_argument(
        "--node-labels",
        metavar="K=V,...",
        help="show which resources a node with these labels serves (nodeSelector)",
    )

    sub.add_parser("schema", help="print the config JSON Schema")
    _add_convert(sub)

    p = sub.add_parser("discover", help="show the units each resource would advertise here")
    p.add_argument("path", type=Path, metavar="PATH", help="config file or directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _setting_flags(p, DiscoverySettings)

    p = sub.add_parser("serve", help="run the device plugin daemon")
    _setting_flags(p, Settings)

    p = sub.add_parser(
        "simulate", help="run the real daemon against an embedded kubelet, no cluster needed"
    )
    p.add_argument("path", type=Path, metavar="PATH", help="config file or directory")
    p.add_argument(
        "--allocate",
        action="append",
        default=[],
        metavar="RESOURCE=N",
        help="allocate N units of RESOURCE to a container and show what it receives",
    )
    p.add_argument(
        "--backend",
        choices=("device-plugin", "dra"),
        default="device-plugin",
        help="dra: print the ResourceSlices this node would publish and what a claim gets",
    )
    _driver_alias(p)
    p.add_argument("--once", action="store_true", help="exit after the first report")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for registration")
    _setting_flags(p, Settings, skip=SIMULATE_SKIPS)

    p = sub.add_parser(
        "deviceclasses", help="print a DeviceClass per resource, for the DRA backend (YAML)"
    )
    p.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH",
        help="config files or directories, read together as one config",
    )  # fmt: skip
    _driver_alias(p)
    _setting_flags(p, Settings, skip=frozenset(Settings.model_fields) - {"dra_driver_name"})

    p = sub.add_parser(
        "reconcile-classes",
        help="keep the DRA DeviceClasses of the config's resources on the API server (one"
        " replica per cluster, a Lease)",
        description="Creates, updates and deletes the DeviceClasses labelled as this driver's"
        " (what `deviceclasses` prints) to match the config, watched as `serve` watches it;"
        " a class whose resource left the config is deleted once no node publishes it;"
        " classes without the labels are never touched.",
    )
    _setting_flags(p, ClassSettings, skip=frozenset(Settings.model_fields) - CLASS_SETTINGS_SHARED)
    return parser


def _driver_alias(p: argparse.ArgumentParser) -> None:
    """``--driver``: the shorter spelling of ``--dra-driver-name`` (same setting)."""
    p.add_argument(
        "--driver", dest="dra_driver_name", metavar="NAME", help="same as --dra-driver-name"
    )
