"""The generated CRD: fresh on disk, structural, fully described, and carrying the rules and columns users see."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from disagg.api.crd import structural_schema
from disagg.api.documents import dump_documents, load_documents
from disagg.api.types import Quantity
from tests.conftest import REPO
from tests.support.crdschema import structural_violations, undescribed_properties

CRD_FILE = REPO / "crds" / "disagg.dev_disaggdeployments.yaml"


def test_checked_in_crd_is_what_the_models_generate(crd: dict[str, Any]) -> None:
    assert CRD_FILE.read_text() == dump_documents([crd]), (
        "crds/ is stale: run `make crds` (disagg crd > crds/disagg.dev_disaggdeployments.yaml) and commit it"
    )


def test_crd_file_parses_back_to_the_same_object(crd: dict[str, Any]) -> None:
    assert load_documents(CRD_FILE.read_text())[0].content == crd


def test_schema_is_structural(resource_schema: dict[str, Any]) -> None:
    assert list(structural_violations(resource_schema)) == []


def test_every_property_has_a_description(resource_schema: dict[str, Any]) -> None:
    assert list(undescribed_properties(resource_schema)) == []


def test_metadata_is_left_to_the_server(resource_schema: dict[str, Any]) -> None:
    assert resource_schema["properties"]["metadata"] == {"type": "object"}


def test_names_columns_and_subresources(crd: dict[str, Any]) -> None:
    names = crd["spec"]["names"]
    assert names["kind"] == "DisaggDeployment" and names["plural"] == "disaggdeployments"
    assert set(names["shortNames"]) == {"dd", "disagg"}
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {column["name"]: column["jsonPath"] for column in version["additionalPrinterColumns"]}
    assert columns["Prefill"] == ".status.prefillReady"
    assert columns["Decode"] == ".status.decodeReady"
    assert columns["Phase"] == ".status.phase"
    assert columns["Endpoint"] == ".status.endpoint"
    assert columns["Age"] == ".metadata.creationTimestamp"


def test_nested_objects_default_to_empty_so_their_defaults_apply(resource_schema: dict[str, Any]) -> None:
    spec = resource_schema["properties"]["spec"]["properties"]
    assert spec["transfer"]["default"]["connector"] == "nixl"  # spelled out, so CEL can check the default
    assert spec["transfer"]["properties"]["connector"]["default"] == "nixl"
    assert spec["prefill"]["default"]["tensorParallel"] == 1
    assert spec["prefill"]["properties"]["replicas"]["default"] == 1
    assert "default" not in spec["model"]  # required, no default
    assert (
        "required" in resource_schema["properties"]["spec"]
        and "model" in resource_schema["properties"]["spec"]["required"]
    )


def test_cross_field_rules_are_enforced_by_the_api_server_too(resource_schema: dict[str, Any]) -> None:
    rules = [rule["rule"] for rule in resource_schema["properties"]["spec"]["x-kubernetes-validations"]]
    assert any("tensorParallel %" in rule for rule in rules)
    assert all(rule["message"] for rule in resource_schema["properties"]["spec"]["x-kubernetes-validations"])


def test_conditions_merge_by_type(resource_schema: dict[str, Any]) -> None:
    conditions = resource_schema["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


# The converter on a toy model: each pydantic construct maps to its structural form.


class _Inner(BaseModel):
    level: int = Field(default=3, ge=1, description="A level.")


class _Toy(BaseModel):
    size: Quantity = Field(default="1Gi", description="A quantity.")
    ratio: float = Field(gt=0, description="Strictly positive.")
    mode: str | None = Field(default=None, description="Optional mode.")
    inner: _Inner = Field(default_factory=_Inner, description="Nested.")
    maybe: _Inner | None = Field(default=None, description="Optional nested.")
    extra: dict[str, Any] = Field(default_factory=dict, description="Free form.")
    tags: dict[str, str] = Field(default_factory=dict, description="A map.")
    items: list[str] = Field(default_factory=lambda: ["a"], description="A list with a default.")
    nullable_note: str | None = Field(
        default=None, description="Explicitly nullable.", json_schema_extra={"nullable": True}
    )


def test_converter_maps_each_pydantic_construct() -> None:
    schema = structural_schema(_Toy)
    props = schema["properties"]
    assert props["size"] == {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "default": "1Gi",
        "description": "A quantity.",
    }
    assert props["ratio"]["minimum"] == 0 and props["ratio"]["exclusiveMinimum"] is True
    assert props["mode"]["type"] == "string" and "nullable" not in props["mode"]
    assert props["inner"]["default"] == {"level": 3} and props["inner"]["properties"]["level"]["default"] == 3
    assert "default" not in props["maybe"] and props["maybe"]["type"] == "object"
    assert props["extra"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["tags"]["additionalProperties"] == {"type": "string"}
    assert props["items"]["default"] == ["a"]
    assert props["nullable_note"]["nullable"] is True
    assert schema["required"] == ["ratio"]
    assert list(structural_violations(schema)) == []


def test_converter_refuses_what_cannot_be_structural() -> None:
    class _Union(BaseModel):
        value: int | list[int] = Field(description="Not expressible.")

    with pytest.raises(ValueError, match="cannot express union"):
        structural_schema(_Union)
