"""The defaults of the CRD's structural schema, applied the way kube-apiserver applies them (D252).

The API server fills every default of a custom resource's schema on each write and read, status included: what a
client reads back is what it wrote plus those defaults. The reconciler compares the status it computed with the one
it read to decide whether to write at all, so it compares the stored form, not the computed one; otherwise a field
the operator leaves out and the schema defaults (a serving check's counts while the check is off) makes every pass
send a status patch that changes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

from .crd import resource_schema


def apply_defaults(schema: Mapping[str, Any], value: Any) -> Any:
    """Fill defaults the way the API server does: parents first, then the properties of what exists."""
    if isinstance(value, dict):
        result = dict(value)
        for name, child in schema.get("properties", {}).items():
            if name not in result and "default" in child:
                result[name] = deepcopy(child["default"])
            if name in result:
                result[name] = apply_defaults(child, result[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            result = {key: apply_defaults(extra, item) for key, item in result.items()}
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


@functools.cache
def _status_schema() -> Mapping[str, Any]:
    schema: Mapping[str, Any] = resource_schema()["properties"]["status"]
    return schema


def stored_status(status: dict[str, Any]) -> dict[str, Any]:
    """`status` as the API server stores it: with the CRD's status defaults filled in."""
    stored: dict[str, Any] = apply_defaults(_status_schema(), status)
    return stored
