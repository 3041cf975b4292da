"""Text the API server would refuse: a lone UTF-16 surrogate anywhere in a document, a mapping key included (D73),
and annotations past the API server's total size are validation problems at their path, not failures further
down."""

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


def test_annotations_past_the_api_server_s_total_are_refused_with_their_size_and_the_fix() -> None:
    document = yaml.safe_load(MINIMAL)
    document["spec"]["decode"]["podAnnotations"] = {"big": "x" * (256 * 1024)}
    result = validate_deployment(document)
    assert not result.ok
    [problem] = result.problems
    assert problem.path == "spec.decode.podAnnotations"
    size = len("big") + 256 * 1024
    assert problem.message.startswith(f"annotations take {size} bytes, above the API server's limit of 262144")
    assert problem.fix.startswith("move large values elsewhere (a ConfigMap)")
    document["spec"]["decode"]["podAnnotations"] = {"big": "x" * (256 * 1024 - 3)}
    assert validate_deployment(document).ok  # exactly at the limit
