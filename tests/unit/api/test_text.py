"""Text that is not text: a lone UTF-16 surrogate anywhere in a document, a mapping key included, is a validation
problem at its path, not a crash further down (D73)."""

from __future__ import annotations

import yaml

from disagg.api.validate import validate_deployment
from tests.support.reconciling import MINIMAL


def test_a_lone_surrogate_in_a_mapping_key_is_a_validation_problem() -> None:
    document = yaml.safe_load(MINIMAL)
    document["spec"]["decode"]["podAnnotations"] = {"note\ud83d": "x"}
    result = validate_deployment(document)
    assert not result.ok
    assert [p.message for p in result.problems] == ["contains a lone UTF-16 surrogate"]
    assert result.problems[0].path.startswith("spec.decode.podAnnotations")
