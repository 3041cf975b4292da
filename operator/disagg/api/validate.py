"""The one validation entry point, shared by the operator and `disagg validate`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from disagg.names import API_VERSION, GROUP, KIND

from .deployment import DisaggDeployment, DisaggDeploymentSpec
from .errors import Problem, join_path, problems_from_validation_error
from .rules import check_spec


@dataclass(frozen=True)
class ValidationResult:
    """Either a parsed, rule-checked DisaggDeployment, or the problems that stop it."""

    deployment: DisaggDeployment | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.deployment is not None and not self.problems


def validate_deployment(document: Any) -> ValidationResult:
    """Validate a whole DisaggDeployment object (as parsed from YAML or received from the API server)."""
    if not isinstance(document, Mapping):
        got = type(document).__name__
        problem = Problem("(document)", f"expected a mapping, got {got}", "write a YAML object")
        return ValidationResult(problems=[problem])
    header = list(_header_problems(document)) or list(_text_problems(document))
    if header:
        return ValidationResult(problems=header)
    try:
        deployment = DisaggDeployment.model_validate(dict(document))
    except ValidationError as exc:
        return ValidationResult(problems=problems_from_validation_error(exc, known_fields()))
    problems = check_spec(deployment.spec)
    return ValidationResult(deployment=None if problems else deployment, problems=problems)


def validate_spec(spec: Any) -> tuple[DisaggDeploymentSpec | None, list[Problem]]:
    """Validate only a spec (what the operator receives from kopf); paths still start at `spec`."""
    if not isinstance(spec, Mapping):
        return None, [Problem("spec", "expected a mapping", "write the spec as a YAML object")]
    text = list(_text_problems(spec, ("spec",)))
    if text:
        return None, text
    try:
        parsed = DisaggDeploymentSpec.model_validate(dict(spec))
    except ValidationError as exc:
        return None, problems_from_validation_error(exc, known_fields(), prefix=("spec",))
    problems = check_spec(parsed)
    return (None if problems else parsed), problems


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_problems(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[Problem]:
    """Strings holding half of a UTF-16 surrogate pair: not text at all (no YAML or JSON from the API server has
    them, but a Python caller can), and nothing downstream could encode them."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            yield Problem(join_path(path) or "(document)", "contains a lone UTF-16 surrogate", "remove it")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _text_problems(key, (*path, str(key)))
            yield from _text_problems(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _text_problems(item, (*path, index))


def is_disagg_document(document: Any) -> bool:
    """Whether a YAML document claims to be ours (so a typo in kind is reported, not skipped)."""
    if not isinstance(document, Mapping):
        return False
    api_version = document.get("apiVersion")
    return document.get("kind") == KIND or (isinstance(api_version, str) and api_version.startswith(f"{GROUP}/"))


def _header_problems(document: Mapping[Any, Any]) -> Iterator[Problem]:
    if document.get("apiVersion") != API_VERSION:
        yield Problem(
            "apiVersion", f"{document.get('apiVersion')!r} is not served by this operator", f"use {API_VERSION}"
        )
    if document.get("kind") != KIND:
        yield Problem("kind", f"{document.get('kind')!r} is not {KIND}", f"use kind: {KIND}")


@cache
def known_fields() -> dict[str, tuple[str, ...]]:
    """Dotted path (without list indices) -> the field names allowed there, for "did you mean" hints."""
    table: dict[str, tuple[str, ...]] = {}
    _collect_fields(DisaggDeployment, "", table)
    return table


def _collect_fields(model: type[BaseModel], path: str, table: dict[str, tuple[str, ...]]) -> None:
    if path in table:
        return
    names = []
    for name, info in model.model_fields.items():
        alias = info.alias or name
        names.append(alias)
        for nested in _models_in(info.annotation):
            _collect_fields(nested, f"{path}.{alias}" if path else alias, table)
    table[path] = tuple(names)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    origin = get_origin(annotation)
    if origin in (Union, UnionType, list, tuple) or str(origin).endswith("Annotated"):
        for arg in get_args(annotation):
            yield from _models_in(arg)
