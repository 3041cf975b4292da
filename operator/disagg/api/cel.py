"""CEL rules that the API server enforces itself (`x-kubernetes-validations`), declared next to the models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry. `message` must name the field and say how to fix it."""

    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None

    def as_schema(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path:
            entry["fieldPath"] = self.field_path
        if self.reason:
            entry["reason"] = self.reason
        return entry


def with_cel(*rules: CelRule) -> ConfigDict:
    """Model config that attaches CEL rules to the model's schema node."""
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": [rule.as_schema() for rule in rules]})


def exactly_one_of(*fields: str) -> str:
    """A CEL expression that is true when exactly one of the optional fields is set."""
    terms = " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in fields)
    return f"{terms} == 1"


def at_most_one_of(*fields: str) -> str:
    """A CEL expression that is true when no more than one of the optional fields is set."""
    terms = " + ".join(f"(has(self.{name}) ? 1 : 0)" for name in fields)
    return f"{terms} <= 1"
