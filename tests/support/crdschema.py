"""Offline checks of a CRD schema, mirroring what kube-apiserver enforces.

The real API server is the authority (the e2e suite applies the CRD and exercises CEL there); these helpers give the
same verdicts in milliseconds so that unit tests can hold every example and every bad spec to them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from copy import deepcopy
from typing import Any

import celpy
from openapi_schema_validator import OAS30Validator

from disagg.api.defaults import apply_defaults as apply_defaults  # the operator's own, shared

FORBIDDEN_KEYS = {
    "$ref",
    "$defs",
    "definitions",
    "id",
    "$schema",
    "additionalItems",
    "patternProperties",
    "dependencies",
    "const",
    "discriminator",
    "readOnly",
    "writeOnly",
    "examples",
    "title",
}
_JUNCTORS = ("anyOf", "allOf", "oneOf", "not")


def structural_violations(schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Yield every way `schema` breaks the structural-schema rules of apiextensions.k8s.io/v1."""
    if path == "" and "metadata" in schema.get("properties", {}):
        extra = set(schema["properties"]["metadata"]) - {"type"}
        if extra:
            yield f"metadata: only type may be given at the root (found {sorted(extra)})"
    for key in FORBIDDEN_KEYS & set(schema):
        yield f"{path or '<root>'}: forbidden keyword {key}"
    if schema.get("uniqueItems") is True:
        yield f"{path}: uniqueItems true is forbidden (use x-kubernetes-list-type: set)"
    if "properties" in schema and isinstance(schema.get("additionalProperties"), Mapping):
        yield f"{path}: properties and additionalProperties are mutually exclusive"
    untyped_ok = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    if not schema.get("type") and not untyped_ok:
        yield f"{path}: node has no type"
    for junctor in _JUNCTORS:
        branches = schema.get(junctor)
        if branches is None:
            continue
        for branch in branches if isinstance(branches, list) else [branches]:
            allowed_typed = schema.get("x-kubernetes-int-or-string") and set(branch) == {"type"}
            for banned in ("description", "default", "nullable", "additionalProperties"):
                if banned in branch:
                    yield f"{path}.{junctor}: {banned} is not allowed inside {junctor}"
            if "type" in branch and not allowed_typed:
                yield f"{path}.{junctor}: type is not allowed inside {junctor}"
    if "default" in schema:
        errors = list(OAS30Validator(_strip_extensions(schema)).iter_errors(schema["default"]))
        for error in errors:
            yield f"{path}: default {schema['default']!r} is invalid: {error.message}"
    if "default" in schema:
        for rule in schema.get("x-kubernetes-validations", []):
            environment = celpy.Environment()
            outcome = environment.program(environment.compile(rule["rule"])).evaluate(
                {"self": celpy.json_to_cel(schema["default"])}
            )
            if isinstance(outcome, Exception) or not bool(outcome):
                yield f"{path}: default {schema['default']!r} fails CEL rule {rule['rule']!r}: {outcome}"
    map_keys = schema.get("x-kubernetes-list-map-keys")
    if map_keys:
        required = set(schema.get("items", {}).get("required", []))
        for key in map_keys:
            if key not in required:
                yield f"{path}: list-map key {key} must be required in items"
    for rule in schema.get("x-kubernetes-validations", []):
        try:
            celpy.Environment().compile(rule["rule"])
        except Exception as exc:
            yield f"{path}: CEL rule {rule['rule']!r} does not compile: {exc}"
    for name, child in schema.get("properties", {}).items():
        yield from structural_violations(child, f"{path}.{name}" if path else name)
    if isinstance(schema.get("items"), Mapping):
        yield from structural_violations(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from structural_violations(schema["additionalProperties"], f"{path}{{}}")


def undescribed_properties(schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Yield the path of every property that `kubectl explain` would show without a description.

    The root `metadata` is exempt: the API server forbids anything but its type, and documents it itself.
    """
    for name, child in schema.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        if child_path == "metadata":
            continue
        if not child.get("description"):
            yield child_path
        yield from undescribed_properties(child, child_path)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            yield from undescribed_properties(schema[key], path)


def schema_errors(schema: Mapping[str, Any], value: Any) -> list[str]:
    """OpenAPI v3 validation errors (types, enums, bounds, patterns) with their paths."""
    return _errors(OAS30Validator(_strip_extensions(schema)), value)


def _errors(validator: OAS30Validator, value: Any) -> list[str]:
    return [
        f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}" for error in validator.iter_errors(value)
    ]


def unknown_fields(schema: Mapping[str, Any], value: Any, path: str = "") -> Iterator[str]:
    """Fields the API server would drop (or refuse, with strict field validation) because the schema lacks them."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child_path = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                yield from unknown_fields(properties[key], item, child_path)
            elif isinstance(extra, Mapping):
                yield from unknown_fields(extra, item, child_path)
            elif properties is not None:
                yield child_path
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from unknown_fields(schema["items"], item, f"{path}[{index}]")


def cel_violations(schema: Mapping[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Evaluate every x-kubernetes-validations rule on the (defaulted) value; yield (field path, message)."""
    for rule in schema.get("x-kubernetes-validations", []):
        environment = celpy.Environment()
        program = environment.program(environment.compile(rule["rule"]))
        outcome = program.evaluate({"self": celpy.json_to_cel(value)})
        if isinstance(outcome, Exception):
            yield path + rule.get("fieldPath", ""), f"rule failed to evaluate: {outcome}"
        elif not bool(outcome):
            yield path + rule.get("fieldPath", ""), rule["message"]
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                yield from cel_violations(child, value[name], f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from cel_violations(schema["items"], item, f"{path}[{index}]")


class CrdVerdicts:
    """What the API server says of documents for one CRD schema, for many documents: the schema's validator is built
    once, and each CEL rule's verdict is remembered per what the rule can read of `self` (`_read_by`): two values
    that agree there get the same verdict, and generated documents mostly differ elsewhere."""

    REMEMBERED = 50_000
    """Verdicts kept before the memory starts again; a rule that reads more than LONGEST characters' worth is
    evaluated every time (such a value is seldom seen twice)."""
    LONGEST = 4096

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator = OAS30Validator(_strip_extensions(schema))
        self._cel: dict[tuple[str, str], bool] = {}

    def refusals(self, document: Any) -> list[str]:
        """Why the API server refuses the document (schema, unknown fields, then CEL), or nothing."""
        defaulted = apply_defaults(self.schema, deepcopy(document))
        refusals = _errors(self._validator, defaulted)
        refusals += [f"unknown field {path}" for path in unknown_fields(self.schema, defaulted)]
        if refusals:
            return refusals  # the API server stops at the schema; CEL rules need a structurally valid object
        return list(self._cel_refusals(self.schema, defaulted, celpy.json_to_cel(defaulted), ""))

    def _cel_refusals(self, schema: Mapping[str, Any], value: Any, cel_value: Any, path: str) -> Iterator[str]:
        rules = schema.get("x-kubernetes-validations", [])
        if rules:
            yield from (f"{path}{refusal}" for refusal in self._broken_rules(rules, value, cel_value))
        if isinstance(value, dict):
            for name, child in schema.get("properties", {}).items():
                if name in value:
                    child_path = f"{path}.{name}" if path else name
                    yield from self._cel_refusals(child, value[name], cel_value[name], child_path)
        if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            for index, item in enumerate(value):
                yield from self._cel_refusals(schema["items"], item, cel_value[index], f"{path}[{index}]")

    def _broken_rules(self, rules: list[dict[str, Any]], value: Any, cel_value: Any) -> tuple[str, ...]:
        """(fieldPath: message) of every rule `value` breaks, each rule's verdict remembered per what it reads."""
        broken = []
        for rule in rules:
            key = _read_by(rule["rule"], value)
            verdict = self._cel.get((rule["rule"], key)) if len(key) <= self.LONGEST else None
            if verdict is None:
                outcome = _cel_program(rule["rule"]).evaluate({"self": cel_value})
                verdict = isinstance(outcome, Exception) or not bool(outcome)
                if len(key) <= self.LONGEST:
                    if len(self._cel) >= self.REMEMBERED:
                        self._cel.clear()
                    self._cel[(rule["rule"], key)] = verdict
            if verdict:
                broken.append(f"{rule.get('fieldPath', '')}: {rule['message']}")
        return tuple(broken)


_SELF = re.compile(r"\bself\b(?P<chain>(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?P<next>\s*[(\[]?)")


def _read_by(rule: str, value: Any) -> str:
    """What of `self` the rule can read, written so that equal strings mean equal verdicts. A rule that names
    `self` only as member chains (`self.a.b`, `has(self.a.b)`) reads, of each chain, how far it resolves and the value
    there (or the value it stopped at: a member of a string is an error, of a map without it is absent); a chain
    followed by a call reads the whole receiver (`self.a.size()` reads `self.a`); anything else (`self[...]`, `self`
    alone, a macro on `self`) reads all of `self`. repr tells apart what JSON does (1, 1.0, True, "1")."""
    chains = _chains(rule)
    if chains is None:
        return repr(value)
    parts: list[tuple[int, str, Any]] = []
    for names in chains:
        node, depth = value, 0
        while depth < len(names) and isinstance(node, dict) and names[depth] in node:
            node, depth = node[names[depth]], depth + 1
        if depth == len(names):
            parts.append((depth, "found", node))
        elif isinstance(node, dict):
            parts.append((depth, "absent", None))
        else:
            parts.append((depth, "not a map", node))
    return repr(parts)


@functools.cache
def _chains(rule: str) -> tuple[tuple[str, ...], ...] | None:
    """The member chains below `self` a rule reads, in order; None when it may read all of `self`."""
    chains = []
    for match in _SELF.finditer(rule):
        names = tuple(match["chain"].split(".")[1:])
        if match["next"].strip() == "(":
            names = names[:-1]  # a method: it reads its receiver
        elif match["next"].strip() == "[":
            names = ()
        if not names:
            return None
        chains.append(names)
    return tuple(chains)


@functools.cache
def _cel_program(rule: str) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(rule))


def _strip_extensions(schema: Any) -> Any:
    """OAS30Validator does not know x-kubernetes-int-or-string; translate it and drop the other extensions."""
    if isinstance(schema, Mapping):
        stripped = {
            key: _strip_extensions(value) for key, value in schema.items() if not key.startswith("x-kubernetes-")
        }
        if schema.get("x-kubernetes-int-or-string"):
            stripped = {k: v for k, v in stripped.items() if k != "anyOf"}
            stripped["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return stripped
    if isinstance(schema, list):
        return [_strip_extensions(item) for item in schema]
    return schema
