"""Every validation rule, one bad spec each (tests/support/bad_specs.py): the Python rule refuses it with the field
and the fix and accepts its nearest valid neighbour, and the CRD's CEL rules agree. Two meta-tests keep the table
complete: every place in api/rules.py that reports a problem is reached by a case, and every CEL rule of the CRD
refuses at least one case."""

from __future__ import annotations

import ast
import sys
from typing import Any

import pytest

import disagg.api.rules as rules_module
from disagg.api.errors import Problem
from disagg.api.validate import validate_deployment
from tests.support.bad_specs import CASES, BadSpec, cel_rules, violated_cel_rules
from tests.support.crdschema import apply_defaults

CEL_CASES = [case for case in CASES if case.cel is not None]


def ids(case: BadSpec) -> str:
    return case.id


def test_case_ids_are_unique() -> None:
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_rule_refuses_its_bad_spec_with_the_field_and_the_fix(case: BadSpec) -> None:
    result = validate_deployment(case.document())
    assert result.deployment is None
    assert [problem.path for problem in result.problems] == [case.path], result.problems
    (problem,) = result.problems
    assert problem.message.startswith(case.message), problem.message
    assert problem.fix.startswith(case.fix), problem.fix


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_rule_accepts_the_nearest_valid_spec(case: BadSpec) -> None:
    result = validate_deployment(case.ok_document())
    assert result.ok, result.problems


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_rule_accepts_the_nearest_valid_spec_with_the_schema_defaults(
    case: BadSpec, resource_schema: dict[str, Any]
) -> None:
    """What the operator really reads: the object as the API server stored it, schema defaults filled in."""
    result = validate_deployment(apply_defaults(resource_schema, case.ok_document()))
    assert result.ok, result.problems


@pytest.mark.parametrize("case", CASES, ids=ids)
def test_the_api_servers_cel_rules_agree(case: BadSpec, resource_schema: dict[str, Any]) -> None:
    refused = list(violated_cel_rules(resource_schema, apply_defaults(resource_schema, case.document())))
    accepted = list(violated_cel_rules(resource_schema, apply_defaults(resource_schema, case.ok_document())))
    assert accepted == []
    if case.cel is None:
        assert refused == []  # the operator's rules are the only guard: the API server accepts it
        return
    assert [(path, message) for _, path, message in refused if path == case.cel], refused
    assert all(path == case.cel for _, path, _ in refused), refused
    assert case.cel_message is not None
    assert any(case.cel_message in message for _, _, message in refused), refused


def _problem_sites() -> set[int]:
    tree = ast.parse(open(rules_module.__file__).read())  # noqa: PTH123, SIM115
    return {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Problem"
    }


def test_every_problem_the_rules_can_report_has_a_bad_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    reached: set[int] = set()

    def recording(*args: Any, **kwargs: Any) -> Problem:
        reached.add(sys._getframe(1).f_lineno)
        return Problem(*args, **kwargs)

    monkeypatch.setattr(rules_module, "Problem", recording)
    for case in CASES:
        validate_deployment(case.document())
    sites = _problem_sites()
    assert sites, "no Problem(...) calls found in api/rules.py"
    missing = sorted(sites - reached)
    assert not missing, f"api/rules.py lines {missing} report problems no case in tests/support/bad_specs.py reaches"


def test_every_cel_rule_refuses_some_bad_spec(resource_schema: dict[str, Any]) -> None:
    refused = {
        rule
        for case in CEL_CASES
        for rule, _, _ in violated_cel_rules(resource_schema, apply_defaults(resource_schema, case.document()))
    }
    missing = [rule for rule in cel_rules(resource_schema) if rule not in refused]
    assert not missing, f"CEL rules no case in tests/support/bad_specs.py breaks: {missing}"
