"""Validation problems with a field path and a fix, and how pydantic errors become them."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

RULE_ERROR_TYPE = "disagg_rule"


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a DisaggDeployment: where it is, what is wrong, and how to fix it."""

    path: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.fix}."


def rule_error(message: str, fix: str) -> PydanticCustomError:
    """An error raised from a model validator; it keeps the fix apart so reports can show it."""
    return PydanticCustomError(RULE_ERROR_TYPE, "{message}. Fix: {fix}", {"message": message, "fix": fix})


def join_path(parts: Iterable[str | int]) -> str:
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def problems_from_validation_error(
    error: ValidationError, known_fields: Mapping[str, Sequence[str]], prefix: Sequence[str | int] = ()
) -> list[Problem]:
    """Translate pydantic's errors into Problems with user-facing paths and concrete fixes.

    `known_fields` maps a dotted path (without list indices) to the field names allowed there, so an unknown
    field can be answered with the closest correct spelling.
    """
    problems = []
    for item in error.errors(include_url=False):
        loc = [*prefix, *_strip_union_branches(item["loc"])]
        path = join_path(loc) or "(document)"
        problems.append(_explain(item, loc, path, known_fields))
    return sorted(set(problems))


def _strip_union_branches(loc: Sequence[str | int]) -> list[str | int]:
    # pydantic inserts the union member's type name into the location (e.g. "int", "str", "function-after[...]");
    # users never wrote those, so they are left out of the path.
    branch_markers = ("int", "str", "float", "bool")
    return [
        part
        for part in loc
        if not (isinstance(part, str) and (part in branch_markers or ("[" in part and part.endswith("]"))))
    ]


def _explain(item: Any, loc: list[str | int], path: str, known_fields: Mapping[str, Sequence[str]]) -> Problem:
    kind = item["type"]
    ctx = item.get("ctx") or {}
    given = item.get("input")
    if kind == RULE_ERROR_TYPE:
        return Problem(path, ctx["message"], ctx["fix"])
    if kind == "extra_forbidden":
        parent = ".".join(str(p) for p in loc[:-1] if isinstance(p, str))
        field = str(loc[-1])
        allowed = known_fields.get(parent, ())
        close = difflib.get_close_matches(field, allowed, n=1, cutoff=0.6)
        if close:
            return Problem(path, "unknown field", f'did you mean "{close[0]}"? Rename it')
        listing = ", ".join(allowed) if allowed else "none"
        return Problem(path, "unknown field", f"remove it; fields allowed here are: {listing}")
    if kind == "missing":
        return Problem(path, "required field is missing", "add it")
    if kind in ("int_type", "int_parsing"):
        return Problem(path, f"expected an integer, got {_show(given)}", "write a whole number without quotes")
    if kind in ("float_type", "float_parsing"):
        return Problem(path, f"expected a number, got {_show(given)}", "write a number without quotes")
    if kind in ("bool_type", "bool_parsing"):
        return Problem(path, f"expected true or false, got {_show(given)}", "write true or false without quotes")
    if kind in ("string_type",):
        return Problem(path, f"expected a string, got {_show(given)}", "write a string (quote it in YAML)")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return Problem(path, f"expected a mapping of fields, got {_show(given)}", "write a YAML mapping (key: value)")
    if kind == "list_type":
        return Problem(path, f"expected a list, got {_show(given)}", "write a YAML list (- item)")
    if kind == "literal_error":
        return Problem(path, f"{_show(given)} is not allowed", f"use one of {ctx.get('expected', '')}")
    if kind == "enum":
        return Problem(path, f"{_show(given)} is not allowed", f"use one of {ctx.get('expected', '')}")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = {
            "greater_than_equal": "at least",
            "greater_than": "more than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        limit = next(iter(ctx.values()), "")
        return Problem(path, f"{_show(given)} is out of range", f"use a value {bound} {limit}")
    if kind == "string_too_long":
        return Problem(path, "value is too long", f"shorten it to at most {ctx.get('max_length')} characters")
    if kind == "string_too_short":
        return Problem(path, "value is empty", "give a non-empty value")
    if kind in ("too_long",):
        return Problem(path, "too many entries", f"keep at most {ctx.get('max_length')} entries")
    if kind in ("too_short",):
        return Problem(path, "too few entries", f"give at least {ctx.get('min_length')} entries")
    if kind == "string_pattern_mismatch":
        return Problem(path, f"{_show(given)} has the wrong format", f"match the pattern {ctx.get('pattern')}")
    if kind == "value_error":
        return Problem(path, str(ctx.get("error", item["msg"])), "correct the value as described")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return Problem(path, item["msg"], "correct the value as described")
    return Problem(path, item["msg"], "correct the value as described")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
