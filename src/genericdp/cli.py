"""The command line: ``genericdp serve | validate | discover | schema | simulate``.

Exit codes (for people and for CI):
  0  success
  1  the config is invalid (every problem is printed, with file:line:column)
  2  usage error: bad flags or bad GENERICDP_* settings
  3  the environment is unusable (a device root or socket directory is missing)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from genericdp import __version__
from genericdp.errors import ConfigError, DiscoveryError, GenericdpError

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_ENVIRONMENT = 3


class UsageError(Exception):
    """Bad flags or settings; printed as one line, exit 2."""


def _root_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("device roots (default: GENERICDP_* or the host's)")
    g.add_argument("--dev-root", type=Path, help="where the host's /dev is visible")
    g.add_argument("--sys-root", type=Path, help="where the host's /sys is visible")
    g.add_argument("--udev-root", type=Path, help="where the host's /run/udev is visible")


def _log_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="genericdp",
        description="A generic Kubernetes device plugin: any hardware schedulable from YAML.",
    )
    parser.add_argument("--version", action="version", version=f"genericdp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check config files or directories; exit 1 if invalid")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")

    sub.add_parser("schema", help="print the config JSON Schema")

    p = sub.add_parser("discover", help="show the units each resource would advertise here")
    p.add_argument("path", type=Path, metavar="PATH", help="config file or directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--node-name", help="node name shown to templates")
    _root_flags(p)

    p = sub.add_parser("serve", help="run the device plugin daemon")
    p.add_argument("--config", type=Path, help="config file or directory")
    p.add_argument("--plugin-dir", type=Path, help="kubelet device-plugin directory")
    p.add_argument("--pod-resources-socket", type=Path, help="kubelet PodResources socket")
    p.add_argument("--node-name", help="this node's name (templates, logs)")
    p.add_argument("--rescan-interval", type=float, help="seconds between safety-net rescans")
    p.add_argument(
        "--metrics-address", help="host:port for /metrics, /healthz, /readyz (empty: off)"
    )
    p.add_argument(
        "--pod-resources-poll-interval",
        type=float,
        help="seconds between PodResources List calls (release tracking for cleanup hooks)",
    )
    p.add_argument("--hotplug-settle", type=float, help="seconds a /dev event burst may take")
    p.add_argument("--reload-settle", type=float, help="seconds a config write burst may take")
    _root_flags(p)
    _log_flags(p)

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
    p.add_argument("--once", action="store_true", help="exit after the first report")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for registration")
    _root_flags(p)
    _log_flags(p)
    return parser


def _overrides(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """Flags that were given; they override GENERICDP_* variables."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


_ROOTS = ("dev_root", "sys_root", "udev_root")


def _print_config_error(exc: ConfigError, out: TextIO) -> None:
    for issue in exc.issues:
        print(f"error: {issue}", file=out)
    files = {i.file for i in exc.issues}
    print(f"{len(exc.issues)} problem(s) in {len(files)} file(s)", file=out)


def cmd_validate(args: argparse.Namespace) -> int:
    from genericdp.config import load

    config = load(args.paths)
    print(f"ok: {len(config.resources)} resource(s) in {len(config.files)} file(s)")
    for r in config.resources:
        print(f"  {r.name}  ({r.source.file}:{r.source.line})")
    return EXIT_OK


def cmd_schema(_args: argparse.Namespace) -> int:
    from genericdp.config import schema_text

    sys.stdout.write(schema_text())
    if not schema_text().endswith("\n"):
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_discover(args: argparse.Namespace) -> int:
    from genericdp.config import load
    from genericdp.discovery import discover
    from genericdp.discovery.model import Roots
    from genericdp.report import build_report, to_json, to_text
    from genericdp.settings import DiscoverySettings

    settings = DiscoverySettings(**_overrides(args, _ROOTS))
    roots = Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)
    if not roots.dev.is_dir():
        raise DiscoveryError(f"device root {roots.dev} is not a directory")
    config = load([args.path])
    reports = []
    for definition in config.resources:
        try:
            units = discover(definition, roots)
        except DiscoveryError as exc:
            reports.append(build_report(definition, (), error=str(exc)))
            continue
        reports.append(build_report(definition, units, node_name=args.node_name or ""))
    sys.stdout.write(to_json(reports) + "\n" if args.json else to_text(reports))
    return EXIT_OK


def _settings(args: argparse.Namespace, names: Sequence[str]) -> Any:
    from genericdp.settings import Settings

    return Settings(**_overrides(args, names))


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from genericdp import logsetup

    settings = _settings(
        args,
        (
            "config",
            "plugin_dir",
            "pod_resources_socket",
            "node_name",
            "rescan_interval",
            "metrics_address",
            "pod_resources_poll_interval",
            "hotplug_settle",
            "reload_settle",
            "log_level",
            "log_format",
            *_ROOTS,
        ),
    )
    logsetup.configure(settings.log_level, settings.log_format)
    from genericdp.daemon import serve

    return asyncio.run(serve(settings))


def cmd_simulate(args: argparse.Namespace) -> int:
    import asyncio

    from genericdp import logsetup
    from genericdp.simulate import SimulateUsageError, parse_allocations, simulate

    try:
        requests = parse_allocations(args.allocate)
    except SimulateUsageError as exc:
        raise UsageError(str(exc)) from exc
    settings = _settings(args, ("log_level", "log_format", *_ROOTS))
    logsetup.configure(args.log_level or "warning", settings.log_format)
    return asyncio.run(
        simulate(
            args.path,
            settings,
            requests=requests,
            once=args.once,
            timeout=args.timeout,
        )
    )


COMMANDS = {
    "validate": cmd_validate,
    "schema": cmd_schema,
    "discover": cmd_discover,
    "serve": cmd_serve,
    "simulate": cmd_simulate,
}


def _report(exc: Exception) -> int | None:
    """Print an expected failure for a person; its exit code, or None for a bug."""
    if isinstance(exc, ConfigError):
        _print_config_error(exc, sys.stderr)
        return EXIT_INVALID
    if isinstance(exc, UsageError):
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, ValidationError):
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"])
            given = str(err.get("input", ""))[:80]
            print(
                f"error: setting {loc} (flag --{loc.replace('_', '-')} or "
                f"GENERICDP_{loc.upper()}): {err['msg']}, not {given!r}",
                file=sys.stderr,
            )
        return EXIT_USAGE
    if isinstance(exc, GenericdpError | OSError):  # a root, directory or file we cannot use
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ENVIRONMENT
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        code = _report(exc)
        if code is None:
            raise  # a bug: the traceback is what a bug report needs
        return code


if __name__ == "__main__":
    sys.exit(main())
