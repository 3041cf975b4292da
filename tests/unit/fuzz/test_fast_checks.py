"""The fuzz tier's faster checks (D78) give the verdicts of the plain ones they replace.

`tests/support/kube_schemas.py` resolves the strict schemas' references once instead of through a registry on every
visit; `CrdVerdicts` builds the CRD's validator once and remembers each CEL rule's verdict per what the rule reads
of `self`. Both are held here to the plain computations on the examples, every bad spec and its neighbour, and
objects broken in many ways, so that a faster check never quietly becomes a weaker one.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import re
from collections.abc import Iterator, Mapping
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
from referencing import Registry, Resource

from tests.conftest import EXAMPLES
from tests.support import kube_schemas
from tests.support.bad_specs import CASES, cel_program
from tests.support.crdschema import CrdVerdicts, _read_by, apply_defaults, schema_errors, unknown_fields
from tests.support.rendering import pod_templates, rendered
from tests.support.spec_strategies import BASES


@functools.cache
def _registry_validator(kind: str, api_version: str) -> jsonschema.Validator:
    """What kubernetes_validate.validate builds on every call: the kind's schema, the definitions in a registry."""
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads((kube_schemas.FOLDER / f"{kind.lower()}-{group}.json").read_text())
    definitions = json.loads((kube_schemas.FOLDER / "_definitions.json").read_text())
    registry: Registry[Any] = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _core_objects() -> list[dict[str, Any]]:
    objects = []
    for path in EXAMPLES:
        for obj in rendered(path):
            if obj["kind"] != "LeaderWorkerSet":
                objects.append(obj)
                continue
            for template in pod_templates(obj):
                objects.append(
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
                )
    return objects


_BREAKS: list[Any] = ["x", 1, -1, 70000, 1.5, None, True, [], {}, {"unknownField": 1}, [{"unknownField": 1}]]


def _broken(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The object with one node, somewhere below its root, replaced or given an unknown field."""
    obj = copy.deepcopy(obj)
    node: Any = obj
    for _ in range(rng.randint(1, 10)):
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        key = rng.choice(keys) if keys else None
        if key is None or key in ("kind", "apiVersion"):
            break
        if not isinstance(node[key], (dict, list)) or not node[key] or rng.random() < 0.2:
            node[key] = copy.deepcopy(rng.choice(_BREAKS))
            return obj
        node = node[key]
    if isinstance(node, dict):
        node["unknownField"] = 1
    else:
        node.append({"unknownField": 1})
    return obj


def _verdict(validator: jsonschema.Validator, obj: dict[str, Any]) -> tuple[str, list[Any]] | None:
    error = next(iter(validator.iter_errors(obj)), None)
    return None if error is None else (error.message, list(error.absolute_path))


def test_resolved_references_give_the_registrys_verdicts() -> None:
    rng = random.Random(13)
    objects = _core_objects()
    candidates = objects + [_broken(obj, rng) for obj in objects for _ in range(4)]
    refused = 0
    for obj in candidates:
        fast = _verdict(kube_schemas.validator(obj["kind"], obj["apiVersion"]), obj)
        assert fast == _verdict(_registry_validator(obj["kind"], obj["apiVersion"]), obj), obj
        refused += fast is not None
    assert refused > len(objects) * 3, "most broken objects are refused"
    for obj in objects[:3] + candidates[-3:]:  # and the registry validator is kubernetes_validate's own
        try:
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
            accepted = True
        except kubernetes_validate.ValidationError:
            accepted = False
        assert accepted == (_verdict(_registry_validator(obj["kind"], obj["apiVersion"]), obj) is None)


def test_a_remembered_valid_object_is_not_taken_for_a_changed_one() -> None:
    obj = _core_objects()[0]
    kube_schemas.validate(obj)
    changed = copy.deepcopy(obj)
    changed["metadata"]["labels"] = {"a": 1}
    with pytest.raises(jsonschema.ValidationError):
        kube_schemas.validate(changed)


def _plain_refusals(schema: dict[str, Any], document: dict[str, Any]) -> list[str]:
    defaulted = apply_defaults(schema, copy.deepcopy(document))
    refusals = schema_errors(schema, defaulted) + [f"unknown field {p}" for p in unknown_fields(schema, defaulted)]
    if refusals:
        return refusals
    return list(_plain_cel(schema, celpy.json_to_cel(defaulted), ""))


def _plain_cel(schema: Mapping[str, Any], value: Any, path: str) -> Iterator[str]:
    """Every rule evaluated, nothing remembered (bad_specs.violated_cel_rules, with the value converted once)."""
    for rule in schema.get("x-kubernetes-validations", []):
        outcome = cel_program(rule["rule"]).evaluate({"self": value})
        if isinstance(outcome, Exception) or not bool(outcome):
            yield f"{path}{rule.get('fieldPath', '')}: {rule['message']}"
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                yield from _plain_cel(child, value[name], f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _plain_cel(schema["items"], item, f"{path}[{index}]")


def test_remembered_cel_verdicts_are_the_plain_ones(resource_schema: dict[str, Any]) -> None:
    documents = list(BASES)
    for case in CASES:
        documents += [case.document(), case.ok_document()]
    verdicts = CrdVerdicts(resource_schema)
    first = [verdicts.refusals(document) for document in documents]
    again = [verdicts.refusals(document) for document in reversed(documents)][::-1]  # from the memory, mostly
    plain = [_plain_refusals(resource_schema, document) for document in documents]
    assert first == plain
    assert again == plain
    assert sum(bool(refusals) for refusals in plain) > len(CASES) / 2


@pytest.mark.parametrize(
    ("rule", "one", "other", "same"),
    [
        ("self.a.b == 1", {"a": {"b": 1, "c": 1}}, {"a": {"b": 1, "c": 2}}, True),
        ("self.a.b == 1", {"a": {"b": 1}}, {"a": {"b": 1.0}}, False),
        ("self.a.b == 1", {"a": {"b": 1}}, {"a": {"b": True}}, False),
        ("has(self.a.b)", {"a": {}}, {"a": {"c": 1}}, True),
        ("has(self.a.b)", {"a": {}}, {"a": {"b": None}}, False),
        ("has(self.a.b)", {"a": "x"}, {"a": "y"}, False),
        ("self.a.size() > 1", {"a": "xy", "b": 1}, {"a": "xy", "b": 2}, True),
        ("self.a.size() > 1", {"a": "xy"}, {"a": "xyz"}, False),
        ("self.all(k, k != 'a')", {"a": 1}, {"b": 1}, False),
        ("self[0] == 1", [1, 2], [1, 3], False),
        ("self.a.b == self.c", {"a": {"b": 1}, "c": 1}, {"a": {"b": 1}, "c": 2}, False),
    ],
)
def test_what_a_rule_reads(rule: str, one: Any, other: Any, same: bool) -> None:
    assert (_read_by(rule, one) == _read_by(rule, other)) == same
