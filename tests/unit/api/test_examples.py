"""Every example is valid for the operator and for the API server's schema and CEL rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from disagg.api.documents import load_documents
from disagg.api.validate import validate_deployment
from tests.conftest import EXAMPLES
from tests.support.crdschema import apply_defaults, cel_violations, schema_errors, unknown_fields


def _only_document(path: Path) -> Any:
    documents = load_documents(path.read_text())
    assert len(documents) == 1
    return documents[0].content


def test_there_are_examples_for_every_blog_setup() -> None:
    assert len(EXAMPLES) >= 12


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_passes_operator_validation(path: Path) -> None:
    result = validate_deployment(_only_document(path))
    assert result.problems == []
    assert result.ok


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_passes_operator_validation_as_the_api_server_stores_it(
    path: Path, resource_schema: dict[str, Any]
) -> None:
    """The operator reads what the API server stored, schema defaults filled in: a default that one of the rules
    treats as set by the user (a standalone store's engine segment once) must not turn a valid spec invalid."""
    result = validate_deployment(apply_defaults(resource_schema, _only_document(path)))
    assert result.problems == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_passes_the_crd_schema_and_cel(path: Path, resource_schema: dict[str, Any]) -> None:
    document = _only_document(path)
    assert list(unknown_fields(resource_schema, document)) == []
    defaulted = apply_defaults(resource_schema, document)
    assert schema_errors(resource_schema, defaulted) == []
    assert list(cel_violations(resource_schema, defaulted)) == []


def test_minimal_example_gets_the_documented_defaults() -> None:
    result = validate_deployment(_only_document(next(p for p in EXAMPLES if p.stem == "01-minimal")))
    assert result.deployment is not None
    spec = result.deployment.spec
    assert spec.transfer.connector == "nixl"
    assert spec.transfer.load_failure_policy == "fail"
    assert spec.frontend.router.policy is None  # prefill cache_aware, decode power_of_two
    assert spec.frontend.service.port == 8000
    assert spec.kv_cache.cpu is None and spec.kv_cache.store is None
    assert not spec.prefill.autoscaling.enabled and not spec.decode.autoscaling.enabled
    assert (spec.prefill.replicas, spec.prefill.tensor_parallel) == (2, 4)
    assert (spec.decode.replicas, spec.decode.tensor_parallel) == (1, 8)
    assert spec.engine.prefix_caching is None  # vLLM's own default (on) applies
