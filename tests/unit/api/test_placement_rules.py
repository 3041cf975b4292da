"""Label-selector operators and their values in affinity terms: each operator gets the values it needs, the
refusals name the field and the fix (found unasserted by mutation testing)."""

from __future__ import annotations

from typing import Any

import pytest

from disagg.api.errors import Problem
from disagg.api.validate import validate_deployment
from tests.support.bad_specs import with_spec


def spec_with(expression: dict[str, Any]) -> dict[str, Any]:
    term = {"matchExpressions": [expression]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {
        "apiVersion": "disagg.dev/v1alpha1",
        "kind": "DisaggDeployment",
        "metadata": {"name": "m"},
        "spec": {"model": {"name": "org/model"}, "prefill": {"scheduling": {"affinity": affinity}}},
    }


@pytest.mark.parametrize(
    "expression",
    [
        {"key": "gpu", "operator": "In", "values": ["h100", "b200"]},
        {"key": "gpu", "operator": "NotIn", "values": ["t4"]},
        {"key": "gpu", "operator": "Exists"},
        {"key": "gpu", "operator": "DoesNotExist", "values": []},
        {"key": "gpus", "operator": "Gt", "values": ["4"]},
    ],
)
def test_each_operator_with_the_values_it_needs_is_accepted(expression: dict[str, Any]) -> None:
    result = validate_deployment(spec_with(expression))
    assert result.ok, result.problems


@pytest.mark.parametrize(
    ("expression", "message", "fix"),
    [
        ({"key": "gpu", "operator": "In", "values": []}, "operator In needs values", "list at least one value"),
        ({"key": "gpu", "operator": "Exists", "values": ["x"]}, "operator Exists takes no values", "remove values"),
        ({"key": "gpus", "operator": "Gt", "values": ["4", "8"]}, "operator Gt takes exactly one value", "give one"),
    ],
)
def test_an_operator_with_the_wrong_values_is_refused_with_the_fix(
    expression: dict[str, Any], message: str, fix: str
) -> None:
    result = validate_deployment(spec_with(expression))
    assert not result.ok
    assert len(result.problems) == 1
    problem = result.problems[0]
    assert problem.path.startswith("spec.prefill.scheduling.affinity.nodeAffinity"), problem
    assert message in problem.message and problem.fix.startswith(fix), problem


def test_two_spread_constraints_on_one_key_and_policy_are_refused_with_the_fix() -> None:
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    document = with_spec({"decode": {"scheduling": {"topologySpreadConstraints": [spread, {**spread, "maxSkew": 2}]}}})
    assert validate_deployment(document).problems == [
        Problem(
            "spec.decode.scheduling.topologySpreadConstraints",
            "two constraints spread over zone with whenUnsatisfiable DoNotSchedule",
            "keep one constraint per topologyKey and whenUnsatisfiable",
        )
    ]
    different = {**spread, "whenUnsatisfiable": "ScheduleAnyway"}
    assert validate_deployment(
        with_spec({"decode": {"scheduling": {"topologySpreadConstraints": [spread, different]}}})
    ).ok


@pytest.mark.parametrize("toleration", [{"operator": "Exists"}, {"key": "", "operator": "Exists"}])
def test_a_toleration_without_a_key_tolerates_every_taint_and_is_valid(toleration: dict[str, str]) -> None:
    assert validate_deployment(with_spec({"decode": {"scheduling": {"tolerations": [toleration]}}})).ok
