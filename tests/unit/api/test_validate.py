"""The validation entry point's own decisions: which documents are ours, the field table behind "did you mean"
hints, and the CEL entries the models attach to the CRD."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.api.cel import CelRule, with_cel
from disagg.api.validate import is_disagg_document, known_fields, validate_deployment
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
