"""The ``genericdp`` commands (parser: ``cliparser``; exit codes: ``exits``)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from genericdp import exits
from genericdp.cliparser import SQUAT_DAEMON_FLAGS, build_parser, flag
from genericdp.errors import ConfigError, ConfigIssue, DiscoveryError, GenericdpError
from genericdp.settings import ClassSettings, DiscoverySettings, Settings


class UsageError(Exception):
    """Bad flags or settings; printed as one line, exit 2."""


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The setting flags that were given; they override GENERICDP_* variables."""
    return {n: getattr(args, n) for n in args.settings if getattr(args, n) is not None}


def cmd_validate(args: argparse.Namespace) -> int:
    from genericdp import configsources
    from genericdp.config import load
    from genericdp.k8snames import LabelsError, parse_labels
    from genericdp.report import label_keys_note, served_note

    if not args.paths and not args.helm_values:
        raise UsageError("validate needs a PATH or --helm-values FILE")
    try:
        labels = None if args.node_labels is None else parse_labels(args.node_labels)
    except LabelsError as exc:
        raise UsageError(f"--node-labels: {exc}") from exc
    manifests = [p for p in args.paths if configsources.looks_like_manifest(p)]
    plain = [p for p in args.paths if p not in manifests]
    issues: list[ConfigIssue] = []
    for together in [[p] for p in plain] if args.each else [plain] if plain else []:
        try:
            config = load(together)
        except ConfigError as exc:
            for path in filter(configsources.looks_like_helm_values, together):
                print(
                    f"note: {path} looks like a Helm values file: use --helm-values",
                    file=sys.stderr,
                )
            issues += exc.issues
            continue
        print(f"ok: {len(config.resources)} resource(s) in {len(config.files)} file(s)")
        for r in config.resources:
            print(f"  {r.name}  ({r.source.file}:{r.source.line}){served_note(r, labels)}")
            if note := label_keys_note(r):
                print(note)
    if issues:
        raise ConfigError(issues)
    groups = [configsources.from_helm_values(p) for p in args.helm_values]
    for manifest in manifests:
        groups += configsources.from_manifest(manifest)
    for group in groups:
        checked = configsources.check(group)
        print(f"ok: {len(checked.resources)} resource(s) in {checked.label}")
        for name, where in checked.resources:
            print(f"  {name}  ({where})")
    return exits.EXIT_OK


def cmd_schema(_args: argparse.Namespace) -> int:
    from genericdp.config import schema_text

    text = schema_text()
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return exits.EXIT_OK


def cmd_convert(args: argparse.Namespace) -> int:
    from genericdp.convert import convert_squat

    if not args.device and args.config is None:
        raise UsageError("convert needs --device values, a --config file, or both")
    given = {n: getattr(args, n.replace("-", "_")) for n in SQUAT_DAEMON_FLAGS}
    flags = {n: v for n, v in given.items() if v is not None}
    result = convert_squat(args.device, args.config, args.domain, daemon_flags=flags)
    for note in result.notes:
        print(f"warning: {note}", file=sys.stderr)
    if args.output is not None:
        args.output.write_text(result.text)
    else:
        sys.stdout.write(result.text)
    if result.not_converted:
        print(
            f"error: {len(result.not_converted)} part(s) of squat's config NOT CONVERTED:"
            " the config serves less than squat does (see the warnings)",
            file=sys.stderr,
        )
        return exits.EXIT_FAILED
    return exits.EXIT_OK


def cmd_discover(args: argparse.Namespace) -> int:
    from genericdp.config import load
    from genericdp.discovery import discover
    from genericdp.discovery.model import Roots
    from genericdp.discovery.roots import root_notes
    from genericdp.report import build_report, to_json, to_text
    from genericdp.runtime.budget import NodeBudget, ids_each
    from genericdp.runtime.reconcile import LABELS_UNKNOWN, not_served

    settings = DiscoverySettings(**_overrides(args))
    roots = Roots(dev=settings.dev_root, sys=settings.sys_root, udev=settings.udev_root)
    if not roots.dev.is_dir():
        raise DiscoveryError(f"device root {roots.dev} is not a directory")
    config = load([args.path])
    reports, budget, limited = [], NodeBudget(), list[str]()
    for definition in config.resources:
        try:
            kept = budget.keep(definition.name, discover(definition, roots), ids_each(definition))
        except DiscoveryError as exc:
            reports.append(build_report(definition, (), error=str(exc)))
            continue
        units, limited = kept.units, [*limited, *filter(None, [kept.note(definition.name)])]
        report = build_report(definition, units, node_name=settings.node_name)
        why = not_served(definition, settings.static_node_labels)
        if why == LABELS_UNKNOWN:
            why += " (give them with --node-labels)"
        reports.append(dataclasses.replace(report, not_served=why) if why else report)
    sys.stdout.write(to_json(reports) + "\n" if args.json else to_text(reports))
    # Without its sysfs or udev database a resource finds nothing: not "no devices".
    missing = root_notes(config.resources, roots)
    for note in [*missing, *limited]:
        print(f"warning: {note}", file=sys.stderr)
    return exits.EXIT_ENVIRONMENT if missing else exits.EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from genericdp import logsetup

    settings = Settings(**_overrides(args))
    if settings.backend == "dra" and (problem := settings.dra_problem()):
        raise UsageError(problem)
    logsetup.configure(settings.log_level, settings.log_format)
    from genericdp.daemon import serve

    return asyncio.run(serve(settings))


def cmd_simulate(args: argparse.Namespace) -> int:
    import asyncio

    from genericdp import logsetup
    from genericdp.simulate import SimulateUsageError, parse_allocations, simulate, simulate_dra

    try:
        requests = parse_allocations(args.allocate)
    except SimulateUsageError as exc:
        raise UsageError(str(exc)) from exc
    settings = Settings(**_overrides(args))
    # Quieter than serve unless asked (flag or GENERICDP_LOG_LEVEL): the report is the output.
    level = settings.log_level if "log_level" in settings.model_fields_set else "warning"
    logsetup.configure(level, settings.log_format)
    if args.backend == "dra":
        driver = settings.dra_driver_name
        return asyncio.run(
            simulate_dra(
                args.path, settings, driver=driver, requests=requests, timeout=args.timeout
            )
        )
    return asyncio.run(
        simulate(args.path, settings, requests=requests, once=args.once, timeout=args.timeout)
    )


def cmd_deviceclasses(args: argparse.Namespace) -> int:
    from ruamel.yaml import YAML

    from genericdp.config import load
    from genericdp.deviceclasses import device_classes

    settings = Settings(**_overrides(args))
    config = load(args.paths)
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.explicit_start = True
    yaml.width = 4096  # one line per CEL expression
    yaml.dump_all(device_classes(config, settings.dra_driver_name), sys.stdout)
    return exits.EXIT_OK


def cmd_reconcile_classes(args: argparse.Namespace) -> int:
    import asyncio

    from genericdp import logsetup
    from genericdp.deviceclasses.daemon import reconcile_classes

    settings = ClassSettings(**_overrides(args))
    logsetup.configure(settings.log_level, settings.log_format)
    return asyncio.run(reconcile_classes(settings))


COMMANDS = {
    "validate": cmd_validate,
    "schema": cmd_schema,
    "convert": cmd_convert,
    "discover": cmd_discover,
    "serve": cmd_serve,
    "simulate": cmd_simulate,
    "deviceclasses": cmd_deviceclasses,
    "reconcile-classes": cmd_reconcile_classes,
}


def _report(exc: Exception) -> int | None:
    """Print an expected failure for a person; its exit code, or None for a bug."""
    if isinstance(exc, ConfigError):
        for issue in exc.issues:
            print(f"error: {issue}", file=sys.stderr)
        files = {i.file for i in exc.issues}
        print(f"{len(exc.issues)} problem(s) in {len(files)} file(s)", file=sys.stderr)
        return exits.EXIT_INVALID
    if isinstance(exc, UsageError):
        print(f"error: {exc}", file=sys.stderr)
        return exits.EXIT_USAGE
    if isinstance(exc, ValidationError):
        for err in exc.errors():
            loc = ".".join(str(x) for x in err["loc"])
            given = str(err.get("input", ""))[:80]
            print(
                f"error: setting {loc} (flag {flag(loc)} or "
                f"GENERICDP_{loc.upper()}): {err['msg']}, not {given!r}",
                file=sys.stderr,
            )
        return exits.EXIT_USAGE
    if isinstance(exc, GenericdpError | OSError):  # a root, directory or file we cannot use
        print(f"error: {exc}", file=sys.stderr)
        return exits.EXIT_ENVIRONMENT
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return exits.EXIT_INTERRUPTED
    except Exception as exc:
        code = _report(exc)
        if code is None:
            raise  # a bug: the traceback is what a bug report needs
        return code


if __name__ == "__main__":
    sys.exit(main())
