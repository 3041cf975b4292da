"""The fuzz tier (D78): generated DisaggDeployments an adversarial user could write, over the whole API.

For every generated document:
- validation returns a model or problems (each with a path, a message and a fix), never an exception;
- the CRD (its structural schema and its CEL rules, evaluated offline) refuses nothing Python accepts: what both
  decide, they decide alike (Python refuses more, D6);
- an accepted spec renders without an exception, twice to the same objects, and every object passes the Kubernetes
  1.37 OpenAPI schemas in strict mode and the API server's rules (tests/support/apiserver_rules.py).

`DISAGG_FUZZ_EXAMPLES` sets the number of examples (default 250, about a minute on two cores; a larger run has no
timeout). No counterexample has been found yet; any found is to be kept here as an `@example`, so each run checks
it first.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, event, given, settings
from referencing import Registry, Resource

from disagg.api.validate import validate_deployment
from disagg.render import render_deployment
from tests.support.apiserver_rules import object_violations
from tests.support.bad_specs import cel_program
from tests.support.crdschema import apply_defaults, schema_errors, unknown_fields
from tests.support.rendering import pod_templates
from tests.support.spec_strategies import BASES, OPERATORS_FRONTEND, documents

EXAMPLES = int(os.environ.get("DISAGG_FUZZ_EXAMPLES", "250"))
K8S_VERSION = "1.37.0"
SCHEMAS = kubernetes_validate.utils.importlib_resources.files("kubernetes_validate") / "kubernetes-json-schema"


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.Validator:
    """kubernetes_validate.validate's strict validator, built once per kind (it reads ~5 MB of JSON per call)."""
    folder = SCHEMAS / "v1.37.0-local-strict"
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = json.loads((folder / f"{kind.lower()}-{group}.json").read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry: Registry[Any] = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _crd_refusals(schema: dict[str, Any], document: dict[str, Any]) -> list[str]:
    defaulted = apply_defaults(schema, copy.deepcopy(document))
    refusals = schema_errors(schema, defaulted)
    refusals += [f"unknown field {path}" for path in unknown_fields(schema, defaulted)]
    if refusals:
        return refusals  # the API server stops at the schema; CEL rules need a structurally valid object
    return list(_cel_refusals(schema, celpy.json_to_cel(defaulted), ""))


def _cel_refusals(schema: Mapping[str, Any], value: Any, path: str) -> Iterator[str]:
    """bad_specs.violated_cel_rules over a value converted to CEL once (celpy's maps and lists are dicts and lists
    keyed like the JSON), not once per rule and level: a quarter of the time."""
    for rule in schema.get("x-kubernetes-validations", []):
        outcome = cel_program(rule["rule"]).evaluate({"self": value})
        if isinstance(outcome, Exception) or not bool(outcome):
            yield f"{path}{rule.get('fieldPath', '')}: {rule['message']}"
    if isinstance(value, dict):
        for name, child in schema.get("properties", {}).items():
            if name in value:
                yield from _cel_refusals(child, value[name], f"{path}.{name}" if path else name)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from _cel_refusals(schema["items"], item, f"{path}[{index}]")


def _strict_schema(obj: dict[str, Any]) -> None:
    if obj["kind"] != "LeaderWorkerSet":
        _validator(obj["kind"], obj["apiVersion"]).validate(obj)
        return
    for template in pod_templates(obj):  # a CRD: its pod templates are core/v1
        document = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
        _validator("PodTemplate", "v1").validate(document)


def check(document: dict[str, Any], schema: dict[str, Any]) -> str:
    """Every property for one document; returns what happened to it, for the statistics."""
    result = validate_deployment(copy.deepcopy(document))
    for problem in result.problems:
        assert problem.path and problem.message and problem.fix, problem
    if result.deployment is None:
        return f"refused: {result.problems[0].path.split('[')[0]}"  # the CRD may accept it: Python refuses more (D6)
    refusals = _crd_refusals(schema, document)
    assert not refusals, f"the CRD refuses a spec the operator accepts: {refusals}"
    objects = render_deployment(result.deployment, "ns")
    again = validate_deployment(copy.deepcopy(document)).deployment
    assert again is not None
    assert render_deployment(again, "ns") == objects, "rendering is not deterministic"
    violations = [violation for obj in objects for violation in object_violations(obj)]
    assert not violations, f"the API server would refuse: {violations}"
    for obj in objects:
        _strict_schema(obj)
    return "accepted"


@pytest.mark.timeout(0 if EXAMPLES > 250 else 900)  # 250 take ~1 min on 2 free cores, several under others' load
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(document=documents())
def test_generated_specs(document: dict[str, Any], resource_schema: dict[str, Any]) -> None:
    event(check(document, resource_schema))


def test_the_examples_pass_every_check(resource_schema: dict[str, Any]) -> None:
    assert {check(base, resource_schema) for base in BASES} == {"accepted"}


def test_a_renderer_producing_a_refused_object_is_caught() -> None:
    """The checks can fail: a Deployment with a port named twice and a request above its limit."""
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "i",
                            "ports": [{"name": "http", "containerPort": 1}, {"name": "http", "containerPort": 2}],
                            "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}},
                        }
                    ]
                },
            },
        },
    }
    assert len(list(object_violations(broken))) == 2
    with pytest.raises(jsonschema.ValidationError):
        _strict_schema({**broken, "spec": {**broken["spec"], "paused": "yes"}})


@pytest.mark.parametrize("pool", [{}, {"engine": {"shutdownTimeoutSeconds": 0}, "terminationGracePeriodSeconds": 0}])
@pytest.mark.parametrize("base", range(len(BASES)))
def test_pools_behind_the_serving_gate_render_what_the_api_server_accepts(
    base: int, pool: dict[str, Any], resource_schema: dict[str, Any]
) -> None:
    """Every example behind the operator's frontend: the readiness gate, the pre-stop sleep, the drain timeout,
    the grace period and the gated rollout limits pass the same checks as the generated specs."""
    document = copy.deepcopy(BASES[base])
    document["spec"].setdefault("frontend", {}).setdefault("router", {})["customContainer"] = OPERATORS_FRONTEND
    for role in ("prefill", "decode"):
        document["spec"].setdefault(role, {}).update(copy.deepcopy(pool))
    result = validate_deployment(copy.deepcopy(document))
    assert result.deployment is not None, result.problems
    assert check(document, resource_schema) == "accepted"
    gated = [
        obj
        for obj in render_deployment(result.deployment, "ns")
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith(("-prefill", "-decode"))
    ]
    for obj in gated:
        assert obj["spec"]["template"]["spec"]["readinessGates"] == [{"conditionType": "disagg.dev/serving"}]
