"""The JSON Schema: valid draft 2020-12, shipped once, described for editors."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from genericdp.config import load_text, schema, schema_text
from genericdp.config.model import GlobMatcher, ResourceDefinition
from genericdp.config.v1 import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "schemas" / "config-v1.schema.json"
PACKAGED = ROOT / "src" / "genericdp" / "config" / "config-v1.schema.json"
DOCS = ROOT / "docs" / "config.md"


def _subschemas(node: Any, where: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema inside ``node``, following the keywords that hold schemas."""
    if not isinstance(node, dict):
        return
    yield where, node
    for keyword in ("properties", "$defs"):
        for key, value in node.get(keyword, {}).items():
            yield from _subschemas(value, f"{where}/{keyword}/{key}")
    for keyword in ("oneOf", "anyOf", "allOf"):
        for index, value in enumerate(node.get(keyword, ())):
            yield from _subschemas(value, f"{where}/{keyword}/{index}")
    for keyword in ("items", "additionalProperties", "propertyNames"):
        yield from _subschemas(node.get(keyword), f"{where}/{keyword}")


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    """The shipped schema passes the draft 2020-12 metaschema."""
    loaded = schema()
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(loaded)


def test_published_schema_is_the_packaged_file() -> None:
    """schemas/config-v1.schema.json is the very file the package ships."""
    assert PUBLISHED.resolve() == PACKAGED.resolve()


def test_the_shipped_schema_is_generated_from_the_sections() -> None:
    """The checked-in schema file is what the sections in config/v1/ build: run
    ``./dev schema`` after changing one."""
    assert PACKAGED.read_text(encoding="utf-8") == schema_text(), "stale: run ./dev schema"
    assert json.loads(schema_text()) == schema()


def test_each_definition_has_one_section() -> None:
    """No two sections of config/v1/ define the same $defs name (one would hide the other)."""
    names = [name for section in SECTIONS for name in section.DEFS]
    assert len(names) == len(set(names)) == len(schema()["$defs"])


def test_schema_returns_a_fresh_copy() -> None:
    """Changing the returned dict does not change what the loader validates with."""
    schema()["properties"].clear()
    assert "resources" in schema()["properties"]


def test_every_object_schema_rejects_unknown_keys() -> None:
    """Every schema with properties forbids other keys."""
    for where, node in _subschemas(schema()):
        if "properties" in node and isinstance(node["properties"], dict):
            assert node.get("additionalProperties") is False, where


def test_every_property_has_a_description() -> None:
    """Editors show a description for every key (directly or through its $ref)."""
    loaded = schema()
    for where, node in _subschemas(loaded):
        for key, prop in (node.get("properties") or {}).items():
            if not isinstance(prop, dict):
                continue
            target = prop
            if "description" not in prop and "$ref" in prop:
                target = loaded["$defs"][prop["$ref"].rsplit("/", 1)[-1]]
            assert "description" in target, f"{where}/properties/{key}"


def test_schema_defaults_match_the_docs() -> None:
    """Defaults shown to editors are the ones the loader applies."""
    defs = schema()["$defs"]
    resource = defs["resource"]["properties"]
    assert resource["count"]["default"] == 1
    assert resource["permissions"]["default"] == "rw"
    assert resource["groupBy"]["default"] == "node"
    assert resource["preferredAllocation"]["default"] == "packed"
    assert defs["health"]["properties"]["interval"]["default"] == "10s"
    assert defs["health"]["properties"]["timeout"]["default"] == "3s"
    assert defs["health"]["properties"]["failureThreshold"]["default"] == 3
    assert defs["hook"]["properties"]["timeout"]["default"] == "10s"


def test_the_example_in_the_docs_is_valid() -> None:
    """The reference example in docs/config.md loads without issues."""
    found = re.search(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.DOTALL)
    assert found is not None
    config = load_text(found.group(1), "docs/config.md")
    assert [r.name for r in config.resources] == ["example.com/serial"]


def _defaults(name: str) -> dict[str, Any]:
    """The defaults the schema shows editors for the properties of ``$defs/<name>``."""
    properties = schema()["$defs"][name]["properties"]
    return {key: prop["default"] for key, prop in properties.items() if "default" in prop}


def test_the_loader_applies_the_schema_defaults() -> None:
    """Writing every default the schema shows changes nothing: the defaults of the
    schema, of the checks, of the conversion and of the model are one set."""
    hook = {"exec": ["/bin/true"]}
    bare: dict[str, Any] = {
        "name": "example.com/a",
        "match": [{"glob": "/dev/null"}],
        "health": {"exec": ["/bin/true"]},
        "hooks": {"init": dict(hook), "preStart": dict(hook), "cleanup": dict(hook)},
        "allocate": {"mounts": [{"hostPath": "/run/a", "containerPath": "/run/a"}]},
    }
    explicit = {
        **bare,
        **_defaults("resource"),
        "health": {**bare["health"], **_defaults("health")},
        "hooks": {name: {**hook, **_defaults("hook")} for name in bare["hooks"]},
        "allocate": {
            "mounts": [{"hostPath": "/run/a", "containerPath": "/run/a", **_defaults("mount")}],
            **_defaults("allocate"),
        },
    }
    assert set(_defaults("resource")) == {"groupBy", "count", "permissions", "preferredAllocation"}
    (written,) = load_text(json.dumps({"version": "v1", "resources": [explicit]}), "w").resources
    (omitted,) = load_text(json.dumps({"version": "v1", "resources": [bare]}), "o").resources
    assert written == omitted
    # The model's own defaults are the same ones.
    minimal = {"version": "v1", "resources": [{"name": "example.com/a", "match": bare["match"]}]}
    (loaded,) = load_text(json.dumps(minimal), "m").resources
    assert loaded == ResourceDefinition(name="example.com/a", match=(GlobMatcher("/dev/null"),))
