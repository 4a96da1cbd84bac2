"""The Helm chart's values schema carries the config schema itself.

``helm lint``, ``template``, ``install`` and ``upgrade`` check the values
against ``deploy/helm/genericdp/values.schema.json``; with the config schema
(``genericdp schema``) as its ``config`` property, a misspelt key, a resource
name without a domain or an unquoted USB ID (``idVendor: 0403``, which Helm
reads as the number 259) fails there, with the value's path, before any node
sees it. The rest of the values schema is written by hand; this tool only
replaces ``config`` and keeps the file in the form it is checked in.

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

ROOT = Path(__file__).resolve().parent.parent
VALUES_SCHEMA = ROOT / "deploy" / "helm" / "genericdp" / "values.schema.json"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def config_property() -> dict[str, Any]:
    """The config schema as an embedded resource: its ``$id`` keeps its ``#/$defs`` refs
    pointing into itself; only the root says which draft."""
    embedded = {k: v for k, v in schema().items() if k != "$schema"}
    embedded["description"] = (
        "A config v1 file (docs/config.md), rendered as config.yaml; ignored when"
        " configYaml is set. " + str(embedded.get("description", ""))
    ).strip()
    return embedded


def render(current: dict[str, Any]) -> str:
    """``current`` with the config schema in place, as the file is written."""
    updated = {"$schema": DRAFT, **{k: v for k, v in current.items() if k != "$schema"}}
    updated["properties"] = {**current["properties"], "config": config_property()}
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
            f"{VALUES_SCHEMA.relative_to(ROOT)} is stale (the config schema changed):"
            " run ./dev chart-schema",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
