"""The Kubernetes 1.37 strict OpenAPI schemas that kubernetes-validate ships, as one validator per kind built once.

`kubernetes_validate.validate` reads and indexes about 5 MB of JSON per call and resolves every `$ref` through a
registry on every visit. Here each kind's schema is read once and its references are replaced, once, by the schemas
they name: `{"$ref": X, ...}` becomes `{..., "allOf": [X]}`, which is what a reference means in draft 2020-12 (the
referenced schema applies beside its siblings). A definition is one shared dict, so the recursive ones (JSONSchemaProps)
become cycles that validation follows only as deep as the instance goes. The verdicts are those of
`kubernetes_validate.validate(obj, "1.37.0", strict=True)`; `tests/unit/fuzz/test_kube_schemas.py` holds the two to
the same verdicts.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema
import kubernetes_validate

FOLDER = kubernetes_validate.utils.importlib_resources.files("kubernetes_validate") / (
    "kubernetes-json-schema/v1.37.0-local-strict"
)
_REFERENCE = re.compile(r"^(?:/api/_definitions\.json)?#/\$defs/(?P<name>[^/]+)$")
_IDENTITY_KEYS = {"$id", "$schema"}  # only locate references, all of which are resolved here


@functools.cache
def _definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = json.loads((FOLDER / "_definitions.json").read_text())["$defs"]
    return definitions


def _inline(schema: Any, definitions: dict[str, Any], done: dict[str, dict[str, Any]]) -> Any:
    if isinstance(schema, list):
        return [_inline(item, definitions, done) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result = {
        key: _inline(value, definitions, done)
        for key, value in schema.items()
        if key not in _IDENTITY_KEYS and key != "$ref"
    }
    if "$ref" in schema:
        match = _REFERENCE.match(schema["$ref"])
        assert match, f"a reference this module does not resolve: {schema['$ref']}"
        result["allOf"] = [*result.get("allOf", []), _definition(match["name"], definitions, done)]
    return result


def _definition(name: str, definitions: dict[str, Any], done: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if name not in done:
        done[name] = {}  # placed before its contents, so that a definition naming itself gets this very dict
        done[name].update(_inline(definitions[name], definitions, done))
    return done[name]


@functools.cache
def _shared() -> dict[str, dict[str, Any]]:
    return {}


@functools.cache
def validator(kind: str, api_version: str) -> jsonschema.Validator:
    """The strict validator of one kind (an apiVersion with a group is named by the group's first label, as
    kubernetes-validate names its files)."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads((FOLDER / f"{kind.lower()}-{group}.json").read_text())
    return jsonschema.validators.Draft202012Validator(_inline(schema, _definitions(), _shared()))


_VALID: set[str] = set()
"""Objects found valid (as repr, which tells apart what JSON does): rendered objects repeat across specs."""
_REMEMBERED = 5_000


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when the object breaks its kind's strict schema."""
    key = repr(obj)
    if key in _VALID:
        return
    validator(obj["kind"], obj["apiVersion"]).validate(obj)
    if len(_VALID) >= _REMEMBERED:
        _VALID.clear()
    _VALID.add(key)
