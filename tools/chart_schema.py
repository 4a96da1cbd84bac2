"""The Helm chart's values schema carries the config schema itself.

``helm lint``, ``template``, ``install`` and ``upgrade`` check the values
against ``deploy/helm/genericdp/values.schema.json``; with the config schema
(``genericdp schema``) as its ``config`` property, a misspelt key, a resource
name without a domain or an unquoted USB ID (``idVendor: 0403``, which Helm
reads as the number 259) fails there, with the value's path, before any node
sees it. The values that become ``serve``'s settings (``SETTING_VALUES``)
take their schema from the settings model, so ``helm lint`` refuses what
``serve`` would refuse on every node (``rescanInterval: 30s``), naming the
value. The rest of the values schema is written by hand; this tool only
replaces those properties and keeps the file in the form it is checked in.

    python -m tools.chart_schema write    rewrite the file (./dev chart-schema)
    python -m tools.chart_schema check    exit 1 when the file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from genericdp.config import schema
from genericdp.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
VALUES_SCHEMA = ROOT / "deploy" / "helm" / "genericdp" / "values.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _one_key_objects(branches: list[Any]) -> list[str] | None:
    """The keys of a oneOf whose every branch is a closed object told apart by one
    required key (the matcher: glob or udev), or None."""
    keys: list[str] = []
    if not isinstance(branches, list) or len(branches) < 2:  # noqa: PLR2004 -- a choice
        return None
    for branch in branches:
        if not (
            isinstance(branch, dict)
            and branch.get("type") == "object"
            and branch.get("additionalProperties") is False
            and len(branch.get("required", ())) == 1
        ):
            return None
        keys.append(branch["required"][0])
    return keys if len(set(keys)) == len(keys) else None


def for_helm(node: Any) -> Any:
    """The schema with each oneOf of closed objects told apart by one key (``match``
    items) written as one object: every branch's properties, at least one of the keys
    and never two. The same values pass; but Helm's validators report a wrong value
    inside a branch at its own path, instead of first every branch's missing and
    unknown keys (``missing property 'glob'`` before ``got number, want string``)."""
    if isinstance(node, list):
        return [for_helm(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {k: for_helm(v) for k, v in node.items()}
    keys = _one_key_objects(node.get("oneOf", []))
    if keys is None:
        return node
    branches = node.pop("oneOf")
    properties: dict[str, Any] = {}
    for branch in branches:
        properties.update(branch["properties"])
    return {
        **node,
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "anyOf": [{"required": [key]} for key in keys],
        "not": {"anyOf": [{"required": [a, b]} for a in keys for b in keys if a < b]},
    }


def config_property() -> dict[str, Any]:
    """The config schema as an embedded resource: its ``$id`` keeps its ``#/$defs`` refs
    pointing into itself; only the root says which draft. Written for Helm's
    validators (``for_helm``)."""
    embedded = {k: v for k, v in for_helm(schema()).items() if k != "$schema"}
    embedded["description"] = (
        "A config v1 file (docs/config.md), rendered as config.yaml; ignored when"
        " configYaml is set. " + str(embedded.get("description", ""))
    ).strip()
    return embedded


# The chart's values that templates/daemonset.yaml passes to the daemon as one
# setting each, by path -> (the setting, whether "" leaves it to genericdp's
# default: the template then sets no variable).
SETTING_VALUES: dict[tuple[str, ...], tuple[str, bool]] = {
    ("backend",): ("backend", False),
    ("dra", "driverName"): ("dra_driver_name", False),
    ("logLevel",): ("log_level", False),
    ("logFormat",): ("log_format", False),
    ("nodeFeatures", "publish"): ("node_features", True),
    ("rescanInterval",): ("rescan_interval", True),
}


def setting_property(field: str, *, empty: bool, description: str = "") -> dict[str, Any]:
    """The JSON schema the settings model gives FIELD, as a chart value described by
    DESCRIPTION (the setting's own description when empty).

    With EMPTY, "" is valid too. A number setting then takes "" or a number:
    any other string is refused as not a number (Helm's message says so),
    although the variable would be a string, since a string's bounds cannot
    be checked (``"100000"``)."""
    model = Settings.model_json_schema()["properties"][field]
    prop = {k: v for k, v in model.items() if k not in ("title", "default")}
    if not description:
        description = f"GENERICDP_{field.upper()}: {prop['description']}"
        if empty:
            description += f"; empty: genericdp's default ({model['default']})"
    del prop["description"]
    if empty and "enum" in prop:
        prop["enum"] = ["", *prop["enum"]]
    elif empty:
        kind = prop.pop("type")
        prop = {
            "type": [kind, "string"],
            **prop,
            "if": {"type": "string", "minLength": 1},
            "then": {"type": kind},
        }
    return {"description": description, **prop}


def _with_settings(properties: dict[str, Any]) -> dict[str, Any]:
    updated: dict[str, Any] = json.loads(json.dumps(properties))
    for path, (field, empty) in SETTING_VALUES.items():
        where = updated
        for key in path[:-1]:
            where = where[key]["properties"]
        written = where.get(path[-1], {}).get("description", "")
        where[path[-1]] = setting_property(field, empty=empty, description=written)
    return updated


def render(current: dict[str, Any]) -> str:
    """``current`` with the config schema and the settings' schemas in place, as the
    file is written."""
    updated = {"$schema": DRAFT, **{k: v for k, v in current.items() if k != "$schema"}}
    updated["properties"] = {**_with_settings(current["properties"]), "config": config_property()}
    return json.dumps(updated, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.chart_schema")
    parser.add_argument("action", choices=("write", "check"))
    args = parser.parse_args(argv)
    text = VALUES_SCHEMA.read_text()
    wanted = render(json.loads(text))
    if args.action == "write":
        VALUES_SCHEMA.write_text(wanted)
        return 0
    if text != wanted:
        print(
            f"{VALUES_SCHEMA.relative_to(ROOT)} is stale (the config schema or the settings"
            " changed):"
            " run ./dev chart-schema",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
