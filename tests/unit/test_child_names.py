"""Two DisaggDeployments in one namespace never name a child alike (D71). Regression: `x` and `x-router` (or
`-render`, `-kv-store`, `-prefill-pool`, `-decode-pool`) both rendered a Service named `x-router`."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from disagg.api.validate import validate_deployment
from disagg.names import CHILD_NAME_SUFFIXES, child_names
from tests.support.crdschema import apply_defaults, cel_violations


def _document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "metadata": {"name": name},
        "spec": {"model": {"name": "org/model"}},
    }


def _accepted(name: str) -> bool:
    return validate_deployment(_document(name)).ok


def test_no_suffix_ends_with_another() -> None:
    """What makes the scheme collision-free: `a` + s == `b` + t with s != t needs s to end with t."""
    for suffix in CHILD_NAME_SUFFIXES:
        for other in CHILD_NAME_SUFFIXES:
            assert suffix == other or not suffix.endswith(other), (suffix, other)


def test_every_rendered_child_name_is_one_of_child_names() -> None:
    from tests.conftest import EXAMPLES
    from tests.support.rendering import rendered

    for path in EXAMPLES:
        objects = rendered(path)
        name = objects[0]["metadata"]["labels"]["disagg.dev/deployment"]
        assert {obj["metadata"]["name"] for obj in objects} <= set(child_names(name)), path.name


@pytest.mark.parametrize("suffix", CHILD_NAME_SUFFIXES)
def test_a_name_ending_like_a_child_is_refused_by_validation_and_the_crd(
    suffix: str, resource_schema: dict[str, Any]
) -> None:
    name = f"chat{suffix}"
    result = validate_deployment(_document(name))
    assert not result.ok and result.problems[0].path == "metadata.name"
    assert suffix in result.problems[0].message
    violations = cel_violations(resource_schema, apply_defaults(resource_schema, _document(name)))
    assert any("must not end with" in message for _, message in violations)


@pytest.mark.parametrize("name", ["chat", "router", "chat-routers", "chat-pool", "chat-store", "chat-prefill2"])
def test_other_names_stay_allowed(name: str, resource_schema: dict[str, Any]) -> None:
    assert _accepted(name)
    assert list(cel_violations(resource_schema, apply_defaults(resource_schema, _document(name)))) == []


_NAMES = st.from_regex(r"\A[a-z](-?[a-z]){0,3}(-(prefill|decode|router|render|kv|store|config|pool)){0,3}\Z")


@settings(max_examples=200, deadline=None)
@given(_NAMES, _NAMES)
def test_two_accepted_names_never_share_a_child_name(first: str, second: str) -> None:
    if first == second or not (_accepted(first) and _accepted(second)):
        return
    assert not set(child_names(first)) & set(child_names(second))
