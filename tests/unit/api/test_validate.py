"""The validation entry point's own decisions: which documents are ours, the field table behind "did you mean"
hints, and the CEL entries the models attach to the CRD."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.api.cel import CelRule, with_cel
from disagg.api.errors import Problem
from disagg.api.validate import is_disagg_document, known_fields, validate_deployment, validate_spec
from disagg.names import API_VERSION
from tests.support.bad_specs import with_spec


@pytest.mark.parametrize(
    ("document", "ours"),
    [
        ({"apiVersion": API_VERSION, "kind": "DisaggDeployment"}, True),
        ({"kind": "DisaggDeployment"}, True),  # the apiVersion is mistyped or missing: still reported as ours
        ({"apiVersion": "disagg.dev/v1", "kind": "DisagDeployment"}, True),  # a typo in kind, our group
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, False),
        ({"apiVersion": 1, "kind": "ConfigMap"}, False),
        ({}, False),
        (["kind", "DisaggDeployment"], False),
        ("DisaggDeployment", False),
    ],
)
def test_a_document_is_ours_by_its_kind_or_its_group(document: Any, ours: bool) -> None:
    assert is_disagg_document(document) is ours


def test_the_field_table_lists_every_level_by_its_yaml_names() -> None:
    table = known_fields.__wrapped__()  # uncached: built again, not the copy an earlier test left
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(table[""])
    assert "tensorParallel" in table["spec.prefill"]  # the alias, not the Python name
    assert "tensor_parallel" not in table["spec.prefill"]
    assert "tensorParallel" in table["spec.decode"]
    # models reached through `X | None` and lists are walked too
    assert "image" in table["spec.prefill.customContainer"]
    assert {"name", "value"} <= set(table["spec.engine.env"])
    assert "type" in table["status.conditions"]
    assert all(isinstance(names, tuple) and names for names in table.values())


def test_an_unknown_field_deep_in_the_spec_gets_a_hint_from_that_level() -> None:
    (problem,) = validate_deployment(with_spec({"prefill": {"tensorParalel": 2}})).problems
    assert problem.path == "spec.prefill.tensorParalel"
    assert problem.message == "unknown field"
    assert 'did you mean "tensorParallel"?' in problem.fix


def test_a_cel_rule_is_written_as_the_api_server_reads_it() -> None:
    full = CelRule("self.a <= self.b", "spec.a must not exceed spec.b", field_path=".a", reason="FieldValueInvalid")
    assert full.as_schema() == {
        "rule": "self.a <= self.b",
        "message": "spec.a must not exceed spec.b",
        "fieldPath": ".a",
        "reason": "FieldValueInvalid",
    }
    assert CelRule("has(self.x)", "set x").as_schema() == {"rule": "has(self.x)", "message": "set x"}


def test_cel_rules_attach_to_the_models_schema_node_in_order() -> None:
    config = with_cel(CelRule("a", "first"), CelRule("b", "second", field_path=".b"))
    assert config["json_schema_extra"] == {
        "x-kubernetes-validations": [
            {"rule": "a", "message": "first"},
            {"rule": "b", "message": "second", "fieldPath": ".b"},
        ]
    }


def test_the_operator_validates_a_spec_alone_with_paths_from_spec() -> None:
    """What the reconciler receives is the spec, not the document: the same problems, at the same paths."""
    spec, problems = validate_spec({"model": {"name": "m"}, "prefill": {"replicas": 3}})
    assert problems == [] and spec is not None and spec.prefill.replicas == 3
    assert validate_spec(["not", "a", "mapping"]) == (
        None,
        [Problem("spec", "expected a mapping", "write the spec as a YAML object")],
    )
    assert (
        validate_spec({"model": {"name": "m", "bogus": 1}})[1]
        == validate_deployment(with_spec({"model": {"name": "m", "bogus": 1}})).problems
    )
    rejected, [problem] = validate_spec({"model": {"name": "m"}, "frontend": {"router": {"prefillPolicy": "p2c"}}})
    assert rejected is None and problem.path == "spec.frontend.router.prefillPolicy"
    assert validate_spec({"model": {"name": "m\ud800"}})[1] == [
        Problem("spec.model.name", "contains a lone UTF-16 surrogate", "remove it")
    ]


@pytest.mark.parametrize(
    ("env", "path", "message", "fix"),
    [
        (
            [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a/b"}}}],
            "spec.engine.env[0].valueFrom.secretKeyRef.key",
            "key 'a/b' must consist of alphanumeric characters, '-', '_' or '.'",
            "name the key as it appears in the Secret or ConfigMap",
        ),
        (
            [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": ".."}}}],
            "spec.engine.env[0].valueFrom.configMapKeyRef.key",
            "key '..' must not be '..'",
            "name the key as it appears in the Secret or ConfigMap",
        ),
        (
            [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
            "spec.engine.env",
            "A is listed twice (containers key env by name, so the API server refuses the object)",
            "keep one entry per name",
        ),
    ],
    ids=["secret key", "config map key", "env name twice"],
)
def test_env_entries_the_api_server_would_refuse_name_the_field_and_the_fix(
    env: list[dict[str, Any]], path: str, message: str, fix: str
) -> None:
    assert validate_deployment(with_spec({"engine": {"env": env}})).problems == [Problem(path, message, fix)]
