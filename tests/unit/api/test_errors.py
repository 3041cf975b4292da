"""Pydantic's errors become Problems a user can act on: the path as written in YAML, what is wrong, and the fix.

The first table goes through the real DisaggDeployment models; the second through a small model of our own for the
error kinds the API's fields do not produce (exclusive bounds, list lengths, enums, tagged unions), so a new field
that does produce them is already explained."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from disagg.api.errors import Problem, join_path, problems_from_validation_error, rule_error
from disagg.api.validate import validate_deployment
from tests.support.bad_specs import BASE, with_spec

REAL = [
    ({"prefill": {"replicas": "two"}}, "spec.prefill.replicas", "expected an integer, got 'two'",
     "write a whole number"),
    ({"prefill": {"expertParallel": "maybe"}}, "spec.prefill.expertParallel", "expected true or false, got 'maybe'",
     "write true or false without quotes"),
    ({"model": {"name": 5}}, "spec.model.name", "expected a string, got 5", "write a string (quote it in YAML)"),
    ({"prefill": 3}, "spec.prefill", "expected a mapping of fields, got 3", "write a YAML mapping (key: value)"),
    ({"engine": {"extraArgs": "--x"}}, "spec.engine.extraArgs", "expected a list, got '--x'", "write a YAML list"),
    ({"transfer": {"connector": "pigeon"}}, "spec.transfer.connector", "'pigeon' is not allowed",
     "use one of 'nixl', 'nixl-push', 'moriio', 'mooncake', 'lmcache' or 'custom'"),
    ({"prefill": {"replicas": -1}}, "spec.prefill.replicas", "-1 is out of range", "use a value at least 0"),
    ({"prefill": {"tensorParallel": 100000}}, "spec.prefill.tensorParallel", "100000 is out of range",
     "use a value at most 1024"),
    ({"prefill": {"podLabels": {"a": "x" * 64}}}, "spec.prefill.podLabels.a",
     f"label value '{'x' * 64}' must be no more than 63 characters",
     "shorten it to at most 63 characters"),
    ({"prefill": {"serviceAccountName": ""}}, "spec.prefill.serviceAccountName", "value is empty",
     "give a non-empty value"),
    ({"prefill": {"serviceAccountName": "Bad_Name"}}, "spec.prefill.serviceAccountName",
     "'Bad_Name' has the wrong format",
     "match the pattern ^[a-z0-9]"),
    ({"scaling": {"ratio": {"min": "abc"}}}, "spec.scaling.ratio.min", "expected a number, got 'abc'",
     "write a number without quotes"),
    ({"prefill": {"zzzzzz": 1}}, "spec.prefill.zzzzzz", "unknown field",
     "remove it; fields allowed here are: replicas, tensorParallel, pipelineParallel, dataParallel, expertParallel"),
    ({"prefill": {"replicaz": 1}}, "spec.prefill.replicaz", "unknown field", 'did you mean "replicas"? Rename it'),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "path", "message", "fix"), REAL, ids=[case[1] + ":" + case[2] for case in REAL])
def test_each_kind_of_bad_value_names_the_field_and_the_fix(
    spec: dict[str, Any], path: str, message: str, fix: str
) -> None:
    (problem,) = validate_deployment(with_spec(spec)).problems
    assert (problem.path, problem.message) == (path, message)
    assert problem.fix.startswith(fix), problem.fix


def test_a_missing_required_field_is_asked_for() -> None:
    document = with_spec({})
    del document["spec"]["model"]["name"]
    (problem,) = validate_deployment(document).problems
    assert problem == Problem("spec.model.name", "required field is missing", "add it")


def _shown(value: str) -> str:
    (problem,) = validate_deployment(with_spec({"prefill": {"replicas": value}})).problems
    return problem.message.removeprefix("expected an integer, got ")


def test_a_long_value_is_shown_cut_to_sixty_characters() -> None:
    assert _shown("x" * 58) == "'" + "x" * 58 + "'"  # 60 characters with its quotes: shown whole
    assert _shown("x" * 59) == "'" + "x" * 56 + "..."
    assert len(_shown("x" * 500)) == 60


def test_every_problem_of_a_document_is_reported_once_in_a_stable_order() -> None:
    document = with_spec({"prefill": {"replicas": "two", "tensorParallel": "one"}, "decode": {"replicas": -3}})
    paths = [problem.path for problem in validate_deployment(document).problems]
    assert paths == ["spec.decode.replicas", "spec.prefill.replicas", "spec.prefill.tensorParallel"]


def test_a_document_that_is_not_a_mapping_is_refused_as_a_whole() -> None:
    (problem,) = validate_deployment(["not", "a", "mapping"]).problems
    assert problem == Problem("(document)", "expected a mapping, got list", "write a YAML object")
    header = dict(BASE, apiVersion="disagg.dev/v1", kind="Deployment")
    assert [(p.path, p.fix) for p in validate_deployment(header).problems] == [
        ("apiVersion", "use disagg.dev/v1alpha1"),
        ("kind", "use kind: DisaggDeployment"),
    ]


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Cat(BaseModel):
    pet: Literal["cat"]


class Dog(BaseModel):
    pet: Literal["dog"]


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    above: Annotated[int, Field(gt=0)] = 1
    below: Annotated[int, Field(lt=10)] = 1
    tags: Annotated[list[str], Field(min_length=1, max_length=2)] = ["a"]
    colour: Colour = Colour.RED
    animal: Annotated[Cat | Dog, Field(discriminator="pet")] = Cat(pet="cat")
    either: int | str = 1
    checked: int = 0
    even: Annotated[int, Field(multiple_of=2)] = 0

    @field_validator("checked")
    @classmethod
    def _check(cls, value: int) -> int:
        if value == 13:
            raise ValueError("unlucky number")
        if value == 7:
            raise rule_error("seven is taken", "pick another number")
        return value


SAMPLE = [
    ({"above": 0}, "above", "0 is out of range", "use a value more than 0"),
    ({"below": 10}, "below", "10 is out of range", "use a value less than 10"),
    ({"tags": ["a", "b", "c"]}, "tags", "too many entries", "keep at most 2 entries"),
    ({"tags": []}, "tags", "too few entries", "give at least 1 entries"),
    ({"colour": "green"}, "colour", "'green' is not allowed", "use one of 'red' or 'blue'"),
    ({"checked": 13}, "checked", "unlucky number", "correct the value as described"),
    ({"checked": 7}, "checked", "seven is taken", "pick another number"),
    ({"animal": {"pet": "fish"}}, "animal", "Input tag 'fish' found using 'pet' does not match any of the expected "
     "tags: 'cat', 'dog'", "correct the value as described"),
    ({"animal": {}}, "animal", "Unable to extract tag using discriminator 'pet'", "correct the value as described"),
    ({"either": [1]}, "either", "expected an integer, got [1]", "write a whole number without quotes"),
    # A kind errors.py has no words for (multiple_of) keeps pydantic's own message.
    ({"even": 3}, "even", "Input should be a multiple of 2", "correct the value as described"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "path", "message", "fix"), SAMPLE, ids=[case[2] for case in SAMPLE])
def test_error_kinds_the_api_does_not_produce_yet_are_explained_too(
    value: dict[str, Any], path: str, message: str, fix: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Sample.model_validate(value)
    problems = problems_from_validation_error(caught.value, {}, prefix=("spec",))
    assert Problem(f"spec.{path}", message, fix) in problems, problems


def test_an_unknown_field_where_no_field_is_allowed_says_so() -> None:
    with pytest.raises(ValidationError) as caught:
        Sample.model_validate({"extra": 1})
    assert problems_from_validation_error(caught.value, {}) == [
        Problem("extra", "unknown field", "remove it; fields allowed here are: none")
    ]
    hinted = problems_from_validation_error(caught.value, {"": ("extras", "above")})
    assert hinted == [Problem("extra", "unknown field", 'did you mean "extras"? Rename it')]


def test_union_branch_names_are_left_out_of_the_path() -> None:
    with pytest.raises(ValidationError) as caught:
        Sample.model_validate({"either": [1]})
    assert {problem.path for problem in problems_from_validation_error(caught.value, {})} == {"either"}


def test_paths_join_fields_with_dots_and_list_positions_with_brackets() -> None:
    assert join_path(["spec", "engine", "env", 2, "name"]) == "spec.engine.env[2].name"
    assert join_path([0, "a"]) == "[0].a"
    assert join_path([]) == ""
    assert str(Problem("spec.x", "is wrong", "set it")) == "spec.x: is wrong. Fix: set it."
